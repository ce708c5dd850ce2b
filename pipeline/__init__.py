"""Token Pipeline Explorer backend: plain Python, no Streamlit."""

"""Presentation helpers shared by the views: escaping, token chips, prompt-cache block rows.

Everything that writes HTML or plotly labels lives here, never in `pipeline/`.
"""

"""Start: what the explorer shows, the stages in order, and where to begin."""
import streamlit as st

from ui.escape import markdown_text
from ui.words import plural
from views.chrome.frame import page_header, stage_link
from views.chrome.navigation import architecture_map, back_next, page_link
from views.chrome.page_list import sections
from views.server.state import get_model, run_queue
from views.server.warm_up import warm_up, warms_scenarios

page_header("Token Pipeline Explorer", "Follow one chat request through a real small language model, "
            f"{markdown_text(get_model().name)}, running on this machine. "
            "Every number on every page comes from the real run of "
            "the request in the sidebar: change the question there and press Run.")

ONE_LINE = {  # what each page of PAGES shows, in one line
    "start": "this page: the map and the path",
    "journey": "the whole request in order, one short section per stage",
    "request": "the JSON an app sends, and the one text the model reads",
    "tokens": "the text cut into pieces, each with its id",
    "tensors": "the ids as rectangles of numbers, padded into a batch",
    "embeddings": "each id picks a row of numbers",
    "position": "how the model knows where each token stands",
    "layers": "the vector of every token, block by block",
    "attention": "which earlier tokens each token reads from",
    "next-token": "from scores to one chosen token",
    "why-token": "which input tokens and which layers made the answer's first token",
    "what-if": "pick another token at any step and see where the answer goes",
    "constrained": "a format (JSON, a choice) that refuses the tokens that would break it",
    "generation": "the answer streamed token by token",
    "kv-cache": "what is kept so each new token is cheap",
    "prefill-decode": "the prompt in one pass, then one pass per token: what limits each",
    "how-it-learned": "the loss on any text, and one real training step",
    "faster-decode": "fewer bytes per token (smaller weights) or more tokens per read (drafts)",
    "prompt-caching": "reusing a cache across requests",
    "cache-audit": "a request log checked for what breaks prompt caching",
    "traffic": "your own client's requests to this server's API, live, block by block",
    "compare-models": "the same request through both models, side by side",
    "presenter": "the stages one screen at a time, in large type, for a room",
}
st.subheader("The model, part by part")
st.caption("Drawn from this model's own sizes; each part opens its page.")
architecture_map()
c1, c2 = st.columns([3, 2])
with c1:
    st.subheader("Every page, in the order a request travels")
    for section, entries in sections():
        st.markdown(f"**{section}**")
        for page in entries:  # each a link carrying the request, as the sidebar's
            page_link(page, f"{page.title}: {ONE_LINE.get(page.url, '')}".rstrip(": "))
with c2:
    st.subheader("Teaching a room?")
    st.markdown("**Presenter mode** walks the same stages one screen at a time in large type, with ← / → keys, "
                "and shows a link and QR code learners can open to follow the same request.")
    stage_link("views/pages/presenter/page.py", "Open presenter mode", "🎓")
    st.markdown("Every page has **Share or export this view** at the bottom of the sidebar: a link that reopens "
                "the same request and controls in any browser, and the run as a JSON file.")

jobs = warm_up()
pending = [name for name, ticket in jobs.items() if not ticket.done()]
failed = {name: ticket.exception() for name, ticket in jobs.items() if ticket.done() and ticket.exception() is not None}
for name, error in failed.items():
    st.warning(f"Preparing {name} failed ({type(error).__name__}: {markdown_text(str(error)[:200])}); it runs again "
               "when someone opens it.", icon="⚠️")
if pending:
    PREFIX = "prompt caching: "  # one list of scenario titles, not the prefix ten times over
    titles = [name.removeprefix(PREFIX) for name in pending if name.startswith(PREFIX)]
    pending = [name for name in pending if not name.startswith(PREFIX)] + (
        [f"{plural(len(titles), 'prompt-caching scenario')} ({', '.join(titles)})"] if titles else [])
    st.info(f"Preparing in the background so that nobody waits for them later: {', '.join(pending)}. "
            f"Requests typed by people always go first ({len(run_queue())} in the model's queue now).", icon="⏳")
elif not failed and not warms_scenarios():
    st.success("Ready: the default request is prepared. This server prepares the prompt-caching scenarios when "
               "their page first opens one (TPE_WARM_UP=request).", icon="✅")
elif not failed:
    scenarios = sum(name.startswith("prompt caching: ") for name in jobs)
    st.success(f"Ready: the default request and all {scenarios} prompt-caching scenarios (the conversation, "
               "every trap and every fix) are prepared; their pages open without running the model.", icon="✅")
back_next()

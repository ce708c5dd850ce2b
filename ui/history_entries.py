"""One history entry per page: the browser's Back and Forward move between pages, as on any site.

Streamlit 1.67's frontend adds a history entry (history.pushState) on a page change, and another each time the
script sets the query string to something the address does not show yet (its handlePageInfoChanged; it replaces
the entry only while it replays a Back or Forward). The app writes the view into the query string during every run
(views/links/url_state.py: the request and the page's controls, once per fragment with controls too), so one visit to
Attention left three entries, each with a few more of its controls: Back replayed an older address of the same
page, which the run then rewrote to the current one, and the page never changed ("Journey → Tokens → Attention,
Back twice: still Attention").

So the page runs a small script (st.html with JavaScript allowed: a fixed script, no user text in it) that makes a
pushState whose address keeps the page's path replace the current entry instead. A page change (a new path) still
adds one; a control moved on the same page updates the address without an entry of its own.

    [/journey?q=..., /tokens?q=..., /attention?q=...&at.layer=3]   # Back: Tokens, as the user left it
"""

SCRIPT = """<script>
(function () {
  if (window.__tpeHistoryEntries) return;  // once for the page's life (Streamlit keeps the document)
  window.__tpeHistoryEntries = true;
  const push = window.history.pushState.bind(window.history);
  window.history.pushState = function (state, title, url) {
    const next = url === undefined || url === null ? null : new URL(String(url), window.location.href);
    if (next === null || next.pathname === window.location.pathname) {  // the same page: its address only
      return window.history.replaceState(state, title, url);
    }
    return push(state, title, url);
  };
})();
</script>"""


def one_entry_per_page() -> None:
    """Call once per page run, before the page's own content (app.py does, in the sidebar)."""
    import streamlit as st

    st.html(SCRIPT, unsafe_allow_javascript=True)

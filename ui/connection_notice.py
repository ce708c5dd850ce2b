"""What the page says while its server is down: "restarting", not "are you connected to the internet?".

While the server does not answer (a replica restarting, a server killed), Streamlit 1.67's frontend keeps
pinging it and, from the sixth failed ping, shows a "Connection error" dialog whose text depends only on
the address in the browser: "Streamlit server is not responding. Are you connected to the internet?", or
on localhost "Is Streamlit still running? ... streamlit run yourscript.py". In an offline room both are
wrong. Neither text is a setting: they are literals in the frontend bundle (static/js/index.*.js), and the
one way to hand errors to someone else, the host config's blockErrorDialogs, is hard-coded False by the
server (web/server/starlette/starlette_routes.py) and is meant for a page that embeds the app.

So the page runs a small script (st.html with unsafe_allow_javascript: a script of ours, no user text)
that watches for that dialog and, while its message is one Streamlit shows as it keeps retrying (the
two above, a ping timeout, or a balancer's 502/503/504 while every replica is down), hides Streamlit's
text and shows NOTE in its place. Other connection errors (a 403 from CORS settings, a fatal error
after which the page does not reconnect) are left as Streamlit says them. Streamlit removes the dialog
itself once it is connected again. Nothing of Streamlit's is removed from the page, so React, which
drew the dialog, finds its own nodes where it left them.
"""
import json

NOTE = "The server is restarting or unreachable; this page reconnects by itself."
# Streamlit's messages while its pings go on failing (it retries for ever after each of them)
RETRYING = (r"^(Streamlit server is not responding|Is Streamlit still running\?|Connection timed out\."
            r"|Connection failed with status 50[234])")

SCRIPT = """<script>
(function () {
  if (window.__tpeConnectionNotice) return;
  window.__tpeConnectionNotice = true;
  const NOTE = %(note)s;
  const RETRYING = new RegExp(%(retrying)s);
  const style = document.createElement('style');
  style.textContent = '[data-tpe-restarting] > :not(.tpe-connection-note) { display: none !important; }';
  document.head.appendChild(style);
  function explain() {
    document.querySelectorAll('[data-testid="stDialog"] [role="dialog"]').forEach(function (dialog) {
      const title = dialog.querySelector('[slot="title"]');
      const body = title && title.nextElementSibling;
      if (!body || title.textContent.trim() !== 'Connection error') return;
      const note = body.querySelector(':scope > .tpe-connection-note');
      const message = Array.from(body.children).filter(function (c) { return c !== note; })
        .map(function (c) { return c.textContent; }).join(' ').trim();
      if (RETRYING.test(message)) {
        if (note) return;
        const p = document.createElement('div');
        p.className = 'tpe-connection-note';
        p.textContent = NOTE;
        body.appendChild(p);
        body.setAttribute('data-tpe-restarting', '');
      } else if (note) {  // Streamlit now says something else (a fatal error): its words again
        note.remove();
        body.removeAttribute('data-tpe-restarting');
      }
    });
  }
  new MutationObserver(explain).observe(document.body, {childList: true, subtree: true, characterData: true});
  explain();
})();
</script>""" % {"note": json.dumps(NOTE), "retrying": json.dumps(RETRYING)}


def explain_connection_errors() -> None:
    """Call once per page run, before the page's own content (app.py does, in the sidebar): the page says the
    server is restarting while it is down, also when the server dies during a page's first, slow run."""
    import streamlit as st

    st.html(SCRIPT, unsafe_allow_javascript=True)

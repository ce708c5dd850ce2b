"""Text boxes never send a lone surrogate: the browser removes it, and says so under the box's name.

A lone surrogate (half of a UTF-16 pair, not a character) can sit in a browser's text box, from a paste or a
script. Streamlit's frontend writes it into its protobuf message as bytes that are not UTF-8, the server
refuses the whole message ("Error deserializing back message") and closes the connection: the edit, and any
other in that message, was lost without a word. This script sees each edit first (a listener on the page's
document, capture phase: before React's own), removes lone surrogates from the box's value and shows a note
naming the box. It runs in the page itself (st.html with JavaScript allowed: a fixed script, no user text in it),
once per browser page. Its pattern is built from strings: the characters '<' and '!' side by side in the script
(a lookbehind, `(?<!`) kept the whole script from ever running when it was written out in st.html's markup.
"""

GUARD = r"""(function () {
  if (window.__tpeTextGuard) return;  // one listener for the page's life (Streamlit keeps the document)
  window.__tpeTextGuard = true;
  const LONE = new RegExp('[\\uD800-\\uDBFF](?![\\uDC00-\\uDFFF])|' +
                          '(?' + '<' + '![\\uD800-\\uDBFF])[\\uDC00-\\uDFFF]', 'g');
  // the value's own setter: React tracks values set through the element, and would not see this edit
  const setters = {TEXTAREA: Object.getOwnPropertyDescriptor(HTMLTextAreaElement.prototype, 'value').set,
                   INPUT: Object.getOwnPropertyDescriptor(HTMLInputElement.prototype, 'value').set};
  function note(box, n) {
    let toast = document.getElementById('tpe-text-guard');
    if (!toast) {
      toast = document.createElement('div');
      toast.id = 'tpe-text-guard';
      toast.setAttribute('role', 'alert');
      toast.style.cssText = 'position: fixed; bottom: 16px; right: 16px; z-index: 100000; max-width: 420px; ' +
        'padding: 10px 14px; border-radius: 8px; background: #fff4e5; color: #663c00; border: 1px solid #f0b35f; ' +
        'font: 14px sans-serif; box-shadow: 0 2px 8px rgba(0,0,0,.15);';
      document.body.appendChild(toast);
    }
    const name = box.getAttribute('aria-label') || 'a text box';
    toast.textContent = 'Removed ' + n + (n === 1 ? ' character' : ' characters') + ' from \u201c' + name +
      '\u201d: a lone surrogate (U+D800 to U+DFFF) is half of a UTF-16 pair, not a character, and cannot be sent.';
    clearTimeout(toast.timer);
    toast.timer = setTimeout(function () { toast.remove(); }, 12000);
  }
  document.addEventListener('input', function (event) {
    const box = event.target;
    const setter = setters[box.tagName];
    if (!setter || typeof box.value !== 'string') return;
    const found = box.value.match(LONE);
    if (!found) return;
    const caret = box.selectionEnd;
    const kept = caret === null ? null : box.value.slice(0, caret).replace(LONE, '').length;
    setter.call(box, box.value.replace(LONE, ''));
    if (kept !== null) box.setSelectionRange(kept, kept);
    note(box, found.length);
  }, true);
})();"""
SCRIPT = "<script>\n" + GUARD + "\n</script>"


def guard_text_boxes() -> None:
    """Call once per page run, before the page's own content (app.py does, in the sidebar): every text box of the
    page drops lone surrogates, with a note, from the moment the box is drawn."""
    import streamlit as st

    st.html(SCRIPT, unsafe_allow_javascript=True)

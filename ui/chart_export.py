"""Every chart downloads as PNG and as SVG, drawn in the browser, with no outside request.

Plotly's own camera button saves a PNG. This adds an "SVG" button beside it on every chart of the
page: it asks the same camera for an SVG (plotly reads the format when clicked) and puts PNG back.
The script runs in the page itself (st.html with JavaScript allowed: a fixed script, no user text in it), once per
browser page: a MutationObserver adds the button to every chart drawn later.
"""
SCRIPT = """<script>
(function () {
  const page = window;
  if (page.__tpeSvgExport) return;  // one observer for the page's life (Streamlit keeps the document)
  page.__tpeSvgExport = true;
  const doc = page.document;
  function addButtons() {
    doc.querySelectorAll('.js-plotly-plot').forEach(function (plot) {
      const camera = plot.querySelector('.modebar-btn[data-title^="Download plot"]');
      if (!camera || plot.querySelector('.tpe-svg')) return;
      const svg = doc.createElement('button');
      svg.className = 'modebar-btn tpe-svg';
      svg.setAttribute('data-title', 'Download plot as an SVG');
      svg.setAttribute('rel', 'tooltip');
      svg.textContent = 'SVG';
      svg.type = 'button';
      svg.style.cssText = 'font: 600 10px sans-serif; color: #506784; padding: 3px 4px; \
cursor: pointer; background: none; border: 0;';
      svg.addEventListener('click', function (event) {
        event.preventDefault();
        const before = plot._context.toImageButtonOptions || {};
        plot._context.toImageButtonOptions = Object.assign({}, before, {format: 'svg'});
        camera.click();
        plot._context.toImageButtonOptions = before;
      });
      camera.parentNode.insertBefore(svg, camera.nextSibling);
    });
  }
  let pending = false;
  new page.MutationObserver(function () {
    if (pending) return;
    pending = true;
    page.setTimeout(function () { pending = false; addButtons(); }, 300);
  }).observe(doc.body, {childList: true, subtree: true});
  addButtons();
})();
</script>"""


def add_svg_buttons() -> None:
    """Call once per page run (app.py does): every chart on the page gets its SVG button."""
    import streamlit as st

    st.html(SCRIPT, unsafe_allow_javascript=True)

"""Every chart downloads as PNG and as SVG, drawn in the browser, with no outside request.

Plotly's own camera button saves a PNG. This adds an "SVG" button beside it on every chart of the
page: it asks the same camera for an SVG (plotly reads the format when clicked) and puts PNG back.
The script runs in an invisible component frame and reaches the page it belongs to (same origin).
"""
SCRIPT = """<script>
(function () {
  const page = window.parent;
  // One installer at a time: the frame that installed it, while that frame is still on the page. A rerun that
  // draws more or fewer elements above this frame replaces it with a new one, and callbacks of a removed
  // frame never run again, so the new frame takes over (charts drawn later would otherwise get no button).
  const installer = page.__tpeSvgExport;
  if (installer && installer !== window && !installer.closed && installer.frameElement
      && installer.frameElement.isConnected) return;
  page.__tpeSvgExport = window;
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
    import streamlit.components.v1 as components

    components.html(SCRIPT, height=0)

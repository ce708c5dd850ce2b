"""How long each page takes to render with the default request, warm (model loaded, run captured).

  .venv/bin/python bench/pages_bench.py

Goal: every page within 5 s of a warm start on 2 CPU cores. Pages are run with
Streamlit's AppTest in this process, so the figure is the script's own time, without the browser.
"""
import os
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.chdir(ROOT)


def main() -> None:
    from streamlit.testing.v1 import AppTest

    from views.chrome.page_list import PAGES

    files = [(p.file, p.title) for p in PAGES]
    t0 = time.perf_counter()
    AppTest.from_file(os.path.join(ROOT, "views", "pages", "journey.py"), default_timeout=600).run()
    print(f"warm-up (model load + the default request's run): {time.perf_counter() - t0:.1f} s\n")
    print(f"{'page':22s} {'first view':>11s} {'again':>8s}")
    worst = 0.0
    for file, title in files:
        times = []
        for _ in range(2):
            at = AppTest.from_file(os.path.join(ROOT, "views", "pages", file), default_timeout=600)
            t0 = time.perf_counter()
            at.run()
            times.append(time.perf_counter() - t0)
            assert not at.exception, f"{file}: {at.exception}"
        worst = max(worst, times[0])
        print(f"{title:22s} {times[0]:10.2f}s {times[1]:7.2f}s")
    print(f"\nslowest first view: {worst:.2f} s  goal <= 5 s  ({'met' if worst <= 5 else 'MISSED'})")


if __name__ == "__main__":
    main()

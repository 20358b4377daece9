"""The controller's dashboard (GET / on its HTTP port) in a real headless Chromium (Debian's
chromium + chromium-driver, driven by selenium): the page loads with no external assets, shows
the cluster's 8 devices by slice and worker, lists a launch after it runs, and turns a killed
worker's devices unhealthy without being reloaded. A screenshot is kept as a test artifact
(build/test-artifacts/dashboard.png). With a token required, the signed-in page still works."""
import json
import shutil
import urllib.error
import urllib.request

import pytest

from conftest import BUILD_DIR, Cluster, wait_for
from dist import EXAMPLES, loom_run

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium (pip) drives the browser")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(not (CHROMIUM and DRIVER),
                                reason="chromium and chromium-driver are not installed (apt-get install chromium "
                                       "chromium-driver)")


@pytest.fixture
def browser():
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    o = Options()
    o.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        o.add_argument(a)
    d = webdriver.Chrome(service=Service(DRIVER), options=o)
    d.set_page_load_timeout(30)
    try:
        yield d
    finally:
        d.quit()


def test_dashboard_shows_devices_launches_and_a_dead_worker(procs, tmp_path, browser):
    c = Cluster(procs, tmp_path)
    f = tmp_path / "http.addr"
    c.start_controller("--http", "127.0.0.1:0", "--http-address-file", str(f))
    http = wait_for(lambda: f.exists() and f.read_text().strip(), 10, what="the HTTP address")
    c.start_worker(4, slice_name="slice-a")
    c.start_worker(4, slice_name="slice-b")
    c.wait_devices(8)

    with urllib.request.urlopen(f"http://{http}/") as r:
        html = r.read().decode()
        assert r.headers["Content-Type"].startswith("text/html")
    for external in ("<script src", "<link", "@import", "url("):
        assert external not in html, f"the page loads an external asset ({external})"
    status = json.loads(urllib.request.urlopen(f"http://{http}/api/status").read())
    assert sum(len(w["devices"]) for w in status["workers"]) == 8

    browser.get(f"http://{http}/")
    by = webdriver.common.by.By

    def count(sel):
        return len(browser.find_elements(by.CSS_SELECTOR, sel))
    wait_for(lambda: count("#devices .device.healthy") == 8, 20, interval=0.2, what="8 healthy devices on the page")
    slices = [e.text for e in browser.find_elements(by.CSS_SELECTOR, "#devices .slice > b")]
    assert sorted(slices) == ["slice slice-a", "slice slice-b"], slices
    assert "8 devices (8 healthy) on 2 workers" in browser.find_element(by.ID, "status").text

    r, _ = loom_run(c.addr, EXAMPLES / "distributed_sum.mlir")
    assert r.returncode == 0, r.stderr
    wait_for(lambda: "distributed_sum.mlir" in browser.find_element(by.ID, "recent").text, 20, interval=0.2,
             what="the launch in the recent list")
    row = browser.find_element(by.ID, "recent").text
    assert "succeeded" in row and " ms" in row, row

    # a worker dies: the same page (no reload) shows its 4 devices unhealthy
    c.procs.kill(c.workers[0])
    wait_for(lambda: count("#devices .device.unhealthy") == 4, 30, interval=0.2, what="4 unhealthy devices")
    assert count("#devices .device.healthy") == 4
    assert "lost" in browser.find_element(by.CSS_SELECTOR, "#devices .worker.lost").text
    assert "(4 healthy)" in browser.find_element(by.ID, "status").text
    art = BUILD_DIR / "test-artifacts"
    art.mkdir(exist_ok=True)
    assert browser.save_screenshot(str(art / "dashboard.png"))
    assert (art / "dashboard.png").stat().st_size > 1000


def test_dashboard_with_authentication(procs, tmp_path, browser):
    """With --http-token-file the page and its /api/status need the token: a browser given it as
    the Basic password (here in the URL, as a user would type it at the prompt) loads the page and
    its polls carry it, so the devices show; without it the answer is 401."""
    token = "t0ken-" + "ab" * 12
    (tmp_path / "http-token").write_text(token + "\n")
    c = Cluster(procs, tmp_path)
    f = tmp_path / "http.addr"
    c.start_controller("--http", "127.0.0.1:0", "--http-address-file", str(f), "--http-token-file",
                       str(tmp_path / "http-token"))
    http = wait_for(lambda: f.exists() and f.read_text().strip(), 10, what="the HTTP address")
    c.start_worker(2, slice_name="slice-a")
    c.wait_devices(2)
    try:
        urllib.request.urlopen(f"http://{http}/")
        raise AssertionError("the page was served without the token")
    except urllib.error.HTTPError as e:
        assert e.code == 401 and "Basic" in str(e.headers.get_all("WWW-Authenticate"))
    browser.get(f"http://anyone:{token}@{http}/")
    by = webdriver.common.by.By
    wait_for(lambda: len(browser.find_elements(by.CSS_SELECTOR, "#devices .device.healthy")) == 2, 20, interval=0.2,
             what="2 healthy devices on the page (its /api/status polls authenticated)")
    assert "2 devices (2 healthy) on 1 workers" in browser.find_element(by.ID, "status").text

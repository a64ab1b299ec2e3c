"""The operations kit against the real Prometheus: rules, alert unit tests, the scrape, the dashboard.

`promtool` and `prometheus` come from Debian's `prometheus` package (`.ci/run` installs it; the
service is never started). Without them these tests skip, or fail under `CI=true`. The
dashboard's queries run against a `prometheus` started here on a free port, scraping every
second a short real workload: `examples/telemetry_prometheus.py`, exposed by the OpenTelemetry
Prometheus exporter.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.redis_support import free_port

if TYPE_CHECKING:
    from collections.abc import Iterator

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "docs" / "dashboards" / "resilience.json"
RULES = ROOT / "docs" / "dashboards" / "alerts.yml"
WORKLOAD = ROOT / "examples" / "telemetry_prometheus.py"
# The pipelines the workload runs: each must be in the dashboard's pipeline dropdown.
PIPELINES = {"api", "batch", "checkout", "inventory", "pool", "prices", "quote", "report", "search"}
# A generous bound for everything that waits on the real processes (a loaded 2-core machine).
DEADLINE = 25.0

pytestmark = pytest.mark.once


def binary(name: str) -> str:
    """The path of `name`, or skip (fail under CI=true) when Debian's `prometheus` package is missing."""
    path = shutil.which(name)
    if path is None:
        reason = f"{name} is not installed (apt-get install prometheus); the operations-kit tests need it"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return path


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - http://127.0.0.1 only
        body = response.read().decode()
    return json.loads(body) if response.headers.get_content_type() == "application/json" else body


# -- rules ------------------------------------------------------------------------------------


def test_promtool_checks_the_rules() -> None:
    """`promtool check rules` accepts docs/dashboards/alerts.yml (syntax, PromQL, templates)."""
    done = subprocess.run(
        [binary("promtool"), "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_promtool_unit_tests_of_the_alerts() -> None:
    """`promtool test rules`: a lost lease pages, a long-open circuit fires, a quiet workload fires nothing..."""
    done = subprocess.run(
        [binary("promtool"), "test", "rules", "alerts_test.yml"],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).parent,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_has_a_unit_test_a_severity_and_a_runbook_line() -> None:
    """Each alert of alerts.yml is tested in alerts_test.yml and has its runbook line in docs/telemetry.md."""
    rules = RULES.read_text(encoding="utf-8")
    alerts = re.findall(r"^\s+- alert: (\w+)$", rules, re.MULTILINE)
    assert set(alerts) == {
        "ResilienceLeaseLost",
        "ResilienceLeaseRenewalsFailing",
        "ResilienceCircuitOpen",
        "ResilienceRetryStorm",
        "ResilienceLimiterRejecting",
    }
    assert "severity: page" in rules.split("- alert: ResilienceLeaseLost")[1].split("- alert:")[0]
    tests = (Path(__file__).parent / "alerts_test.yml").read_text(encoding="utf-8")
    runbook = (ROOT / "docs" / "telemetry.md").read_text(encoding="utf-8").split("## Alerts and runbook")[1]
    for alert in alerts:
        assert re.search(rf"alertname: {alert}\n\s+exp_alerts:\n\s+- exp_labels", tests), f"{alert} never fires"
        assert f"alertname: {alert}, exp_alerts: []" in tests, f"{alert} not in the quiet workload"
        assert f"| `{alert}` |" in runbook, f"{alert} has no runbook line"


# -- the dashboard, read ----------------------------------------------------------------------


def dashboard_targets() -> list[tuple[str, dict[str, Any]]]:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return [(panel["title"], target) for panel in dashboard["panels"] for target in panel["targets"]]


def test_every_query_filters_by_pipeline_and_the_variable_counts_every_execution() -> None:
    """Each resilience selector has `pipeline_name=~"$pipeline"`; the dropdown reads a metric every execution records."""
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    (variable,) = [v for v in dashboard["templating"]["list"] if v["name"] == "pipeline"]
    assert variable["query"]["query"] == "label_values(resilience_pipeline_duration_seconds_count, pipeline_name)"
    for title, target in dashboard_targets():
        selectors = re.findall(r"\b(resilience_[a-z_]+)(\{[^}]*\})?", target["expr"])
        assert selectors, title
        for metric, matchers in selectors:
            assert 'pipeline_name=~"$pipeline"' in matchers, f"{title}: {metric} ignores $pipeline"


def test_rare_events_are_counts_over_the_range() -> None:
    """Lost leases and circuit openings are counted over the dashboard's range (zoom-proof), never a rate."""
    for title, target in dashboard_targets():
        expr = target["expr"]
        if re.search(r"OnLockLost|OnCircuitOpened|OnLockRenewalFailed", expr):
            assert "rate(" not in expr, title
            assert "$__rate_interval" not in expr, title
            for needle in ("increase(", "[$__range]", "offset $__range"):
                assert needle in expr, (title, needle)
            assert target.get("instant") is True, title


def test_a_panel_for_each_signal_operators_asked_for() -> None:
    """Rate-limiter and concurrency-limiter rejections, timeouts, circuits now, leases held now, permits in use."""
    titles: dict[str, str] = {}
    for title, target in dashboard_targets():
        titles[title] = titles.get(title, "") + target["expr"]
    wanted = {
        "Rate-limiter rejections per second": ("OnRateLimiterRejected", "unless on"),
        "Concurrency-limiter rejections per second": ("OnRateLimiterRejected", "and on"),
        "Timeouts per second": ("OnTimeout",),
        "Circuit state now": ("resilience_circuit_state",),
        "Leases held now": ("resilience_lock_held",),
        "Concurrency-limiter permits in use and callers queued now": ("resilience_limiter_in_use",),
        "Retries and hedged attempts per second": ('event_name="OnRetry"',),
        "Duration of successful executions: p50, p99, mean": ('error_type=""',),
    }
    for title, needles in wanted.items():
        assert title in titles, title
        assert all(needle in titles[title] for needle in needles), (title, titles[title])
    exprs = [target["expr"] for _, target in dashboard_targets()]
    assert any("resilience_limiter_queued" in expr for expr in exprs)
    assert not any("resilience_strategy_attempt_duration" in expr for expr in exprs)  # counted hedges and first tries


# -- a real workload, a real Prometheus -------------------------------------------------------


@pytest.fixture(scope="module")
def workload() -> Iterator[int]:
    """`examples/telemetry_prometheus.py --serve`: a round of every signal every 0.2 s; yields its port."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(WORKLOAD), "--port", str(port), "--serve", "--interval", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert "workload done" in line, process.stderr.read() if process.stderr else line
        yield port  # a line a round is left unread: a minute of them fills no pipe
    finally:
        process.terminate()
        process.communicate(timeout=30)


@pytest.fixture(scope="module")
def prometheus(workload: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A `prometheus` on a free port scraping the workload every second, with alerts.yml loaded; its URL."""
    path = binary("prometheus")
    workdir = tmp_path_factory.mktemp("prometheus")
    config = workdir / "prometheus.yml"
    config.write_text(
        json.dumps(  # JSON is YAML
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(RULES)],
                "scrape_configs": [{"job_name": "demo", "static_configs": [{"targets": [f"127.0.0.1:{workload}"]}]}],
            }
        ),
        encoding="utf-8",
    )
    url = f"http://127.0.0.1:{free_port()}"
    log = (workdir / "prometheus.log").open("w")
    process = subprocess.Popen(
        [
            path,
            f"--config.file={config}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address={url.removeprefix('http://')}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        until(lambda: scrapes(url) >= 3, f"Prometheus did not scrape the workload: {workdir / 'prometheus.log'}")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def until(predicate: Any, message: str) -> None:
    """Wait for what the real processes are doing (scrapes, rule evaluations), up to `DEADLINE`."""
    deadline = time.monotonic() + DEADLINE
    while not predicate():
        assert time.monotonic() < deadline, message
        time.sleep(0.2)


def query(url: str, expr: str) -> list[dict[str, Any]]:
    found = get(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}")
    assert found["status"] == "success", found
    return found["data"]["result"]  # type: ignore[no-any-return]


def scrapes(url: str) -> float:
    try:
        result = query(url, 'sum_over_time(up{job="demo"}[1m])')
    except OSError:  # not listening yet
        return 0
    return float(result[0]["value"][1]) if result else 0


def grafana(expr: str, pipeline: str = ".*") -> str:
    """The query Grafana sends, with its variables filled in (instant queries at the range's end)."""
    return expr.replace("$pipeline", pipeline).replace("$__rate_interval", "15s").replace("$__range", "1h")


def has_data(result: list[dict[str, Any]]) -> bool:
    return any(math.isfinite(float(sample["value"][1])) for sample in result)


def test_promtool_checks_a_real_scrape(workload: int) -> None:
    """`promtool check metrics` finds nothing to lint in the workload's /metrics, state metrics included."""
    scraped = get(f"http://127.0.0.1:{workload}/metrics")
    done = subprocess.run(
        [binary("promtool"), "check", "metrics"], input=scraped, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == ""
    for name in ("resilience_lock_held", "resilience_circuit_state", "resilience_limiter_in_use"):
        assert f"# TYPE {name} gauge" in scraped, name
    assert "# TYPE resilience_limiter_queued gauge" in scraped
    assert 'otel_scope_version=""' not in scraped


def test_the_dashboard_and_the_alerts_against_a_real_prometheus(prometheus: str) -> None:
    """Each panel's query, as Grafana sends it, returns finite data; the dropdown lists every pipeline;
    `(checkout|batch)` narrows the lock panel; every rule evaluates cleanly and the lost leases page.

    One test, so that one worker starts one Prometheus.
    """
    targets = dashboard_targets()
    pending = {index: grafana(target["expr"]) for index, (_, target) in enumerate(targets)}

    def answered() -> bool:
        for index, expr in list(pending.items()):
            if has_data(query(prometheus, expr)):
                del pending[index]
        return not pending

    until(answered, f"no data for: {[targets[index][0] for index in pending]}")
    names = get(f"{prometheus}/api/v1/label/pipeline_name/values?match[]=resilience_pipeline_duration_seconds_count")
    assert set(names["data"]) == PIPELINES

    (lock_wait,) = [t["expr"] for _, t in targets if t["legendFormat"] == "{{pipeline_name}} wait p99"]
    shown = {sample["metric"]["pipeline_name"] for sample in query(prometheus, grafana(lock_wait, "(checkout|batch)"))}
    assert "checkout" in shown
    assert shown <= {"checkout", "batch"}  # not report, the other pipeline with a lock

    firing = 'ALERTS{alertname="ResilienceLeaseLost", alertstate="firing"}'
    until(lambda: bool(query(prometheus, firing)), "ResilienceLeaseLost did not fire")
    (page,) = query(prometheus, firing)
    assert (page["metric"]["severity"], page["metric"]["pipeline_name"]) == ("page", "report")

    def rules() -> list[dict[str, Any]]:
        return [rule for group in get(f"{prometheus}/api/v1/rules")["data"]["groups"] for rule in group["rules"]]

    assert len(rules()) == 11
    until(lambda: all(rule["health"] == "ok" for rule in rules()), f"a rule does not evaluate: {rules()}")

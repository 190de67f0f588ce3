"""The status page with a million queued: first paint, the sections filled, the API's reads.

A real `mtad run` (accept only, the admin listener on 127.0.0.1) takes one message
over `POST /v1/messages` (campaign `c000` of tenant `t0`); SQL then makes CAMPAIGNS
campaigns over TENANTS tenants and copies that message MESSAGES times, RECIPIENTS
deliveries each, in statements of CHUNK messages that insert the messages and their
deliveries together (so that the campaigns' triggers count both, as the accept
does): QUEUED deliveries not yet final (mostly queued and never tried, a fifth
deferred once, some held) and SETTLED final ones (delivered, a tenth bounced), over
DOMAINS domains in PROVIDERS provider groups, made over the last six hours. Then
VACUUM ANALYZE, and PAUSED campaigns paused over the API (their deliveries held as
a pause holds them).

Headless Chromium (Debian's, the flags of the browser test) logs in once, then
loads `/` again and again, each a fresh navigation, as a page kept open would be,
and records RUNS rounds of two loads: the first when the node's count of the queue
(`/v1/queue/overview`) is older than COUNTED_FOR s, so that this load waits for a
pass over the deliveries, the second right after it, answered from that count as a
second viewer's would be (between rounds the loads go on unrecorded until the count
is nearly COUNTED_FOR s old, then wait for it to be). Of each load: first paint and first
contentful paint (`performance.getEntriesByType('paint')`), and the time until every
section of the page has been filled from its read (the page's `filled:SECTION`
marks), in ms from the start of the navigation. Then the bytes of the page's files
as served, and each API read the page makes, timed from the client on loopback
(request sent to answer read, one at a time, the count of the queue out of date
first), READS times in turn: the first read and the median of the rest. Goal (issue
34): first paint under GOAL ms with 100 campaigns and a million queued.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as shown
from selenium.webdriver.support.ui import WebDriverWait

import mtad
from bench import report
from bench.mtad_server import MtadError, MtadServer
from mtad.admin import status
from mtad.spool import queue
from tests.browser import ARGUMENTS

ERRORS = (MtadError, OSError, WebDriverException)
TOKEN = "bench-page-token-" + "x" * 16
CAMPAIGNS, TENANTS, PAUSED = 100, 4, 5
RECIPIENTS = 10
QUEUED, SETTLED = 1_000_000, 200_000
MESSAGES = (QUEUED + SETTLED) // RECIPIENTS
QUICK_MESSAGES = MESSAGES // 10
CHUNK = 10_000  # messages per statement
# (domain, provider group): the group a tried delivery was last routed by.
DOMAINS = (("gmail.com", "google"), ("googlemail.com", "google"), ("outlook.com", "microsoft"),
           ("hotmail.com", "microsoft"), ("yahoo.com", "yahoo"), ("icloud.com", "apple"),
           ("gmx.de", "gmx"), ("example.com", "default"), ("example.org", "default"))  # fmt: skip
PROVIDERS = len({group for _, group in DOMAINS})
SECTIONS = ("queue", "rate", "campaigns", "held", "buckets", "warmup", "accounts", "reputation", "nodes")
PAGE_READS = ("/v1/queue/overview", "/v1/reputation?scope=tenant", "/v1/suspensions", "/v1/accounts", "/v1/buckets",
              "/v1/warmup", "/v1/nodes", "/v1/rate?minutes=60", "/v1/campaigns")  # fmt: skip
FILES = ("/", "/page/page.js", "/page/page.css")
RUNS, QUICK_RUNS = 10, 3
READS, QUICK_READS = 7, 3
GOAL = 200.0  # ms to first paint
IDLE, MARGIN = 1.5, 0.5  # s before the count is out of date that the loads stop; s after it that one counts
TIMEOUT = 60.0

CAMPAIGNS_SQL = f"""\
INSERT INTO campaigns (tenant, name, created_at, changed_at)
SELECT 't' || (i % {TENANTS}), 'c' || lpad(i::text, 3, '0'), now() - interval '6 hours', now() - interval '6 hours'
FROM generate_series(1, {CAMPAIGNS - 1}) AS i"""

# Messages lo..hi, copies of the one accepted, RECIPIENTS deliveries each: message m
# is of campaign m mod CAMPAIGNS, made at a time that grows with m; its deliveries
# m * RECIPIENTS + r are final (delivered, a tenth bounced) for the first SETTLED,
# then queued, a fifth deferred once and one in fifty held.
FILL = """\
WITH t AS (SELECT * FROM messages ORDER BY received_at LIMIT 1),
     c AS (SELECT array_agg(id ORDER BY name) AS ids, array_agg(tenant ORDER BY name) AS tenants FROM campaigns),
     g AS (SELECT array[{domains}] AS domains, array[{groups}] AS groups),
     new AS MATERIALIZED (
         SELECT m, uuidv7() AS id, c.ids[1 + m % {campaigns}] AS campaign, c.tenants[1 + m % {campaigns}] AS tenant,
                now() - interval '6 hours' + m * (interval '6 hours' / {messages}) AS at
         FROM c, generate_series({lo}, {hi}) AS m
     ),
     mm AS (
         INSERT INTO messages (id, tenant, sender, message_id, size, body, smtputf8, client_address, received_at,
                               pool, account_pool, campaign)
         SELECT new.id, new.tenant, t.sender, m || '.' || t.message_id, t.size, t.body, t.smtputf8, t.client_address,
                new.at, t.pool, t.account_pool, new.campaign
         FROM new, t
     ),
     d AS (
         SELECT new.*, r, m * {recipients} + r AS i, 1 + (m + r) % cardinality(g.domains) AS k, g.domains, g.groups
         FROM new, g, generate_series(0, {recipients} - 1) AS r
     )
INSERT INTO deliveries (message, recipient, domain, state, attempts, next_attempt_at, last_code, reason,
                        route_group, campaign, created_at, updated_at)
SELECT d.id, 'reader' || d.i || '@' || d.domains[d.k], d.domains[d.k],
       s.state::delivery_state, CASE WHEN s.state = 'queued' OR s.state = 'held' THEN 0 ELSE 1 END,
       CASE s.state WHEN 'deferred' THEN now() + (d.i % 3600) * interval '1 s' WHEN 'queued' THEN d.at
            ELSE d.at END,
       CASE s.state WHEN 'delivered' THEN 250 WHEN 'bounced' THEN 550 WHEN 'deferred' THEN 451 END,
       CASE s.state WHEN 'bounced' THEN 'recipient_rejected' WHEN 'deferred' THEN 'mx_tempfail' END::delivery_reason,
       CASE WHEN s.state IN ('queued', 'held') THEN NULL ELSE d.groups[d.k] END,
       d.campaign, d.at, d.at
FROM d CROSS JOIN LATERAL (SELECT CASE
    WHEN d.i < {settled} THEN CASE WHEN d.i % 10 = 0 THEN 'bounced' ELSE 'delivered' END
    WHEN d.i % 50 = 0 THEN 'held'
    WHEN d.i % 5 = 0 THEN 'deferred'
    ELSE 'queued' END AS state) s"""


@dataclass
class Load:
    """One navigation to `/`: ms from its start."""

    counted: bool  # whether the queue was counted for this load (else answered from a recent count)
    first_paint: float
    first_contentful_paint: float
    filled: dict[str, float]  # section -> when its read was shown
    reads: dict[str, float]  # the page's /v1 reads: request to answer, ms
    bytes: dict[str, int]  # the page's files and reads: body bytes as the browser got them

    @property
    def all_filled(self) -> float:
        return max(self.filled.values())


@dataclass
class Timed:
    path: str
    ms: list[float] = field(default_factory=list)
    size: int = 0


def fill(node: MtadServer, messages: int) -> float:
    """The campaigns, then the copies of the accepted message; returns the seconds taken."""
    started = time.monotonic()
    node.query(CAMPAIGNS_SQL)
    domains = ", ".join(f"'{d}'" for d, _ in DOMAINS)
    groups = ", ".join(f"'{g}'" for _, g in DOMAINS)
    for lo in range(1, messages + 1, CHUNK):
        hi = min(lo + CHUNK - 1, messages)
        node.query(FILL.format(domains=domains, groups=groups, campaigns=CAMPAIGNS, messages=messages, lo=lo, hi=hi,
                               recipients=RECIPIENTS, settled=SETTLED * messages // MESSAGES))  # fmt: skip
        print(f"  {hi * RECIPIENTS:,} deliveries", flush=True)
    node.query("VACUUM ANALYZE messages, deliveries, campaigns, campaign_moves", "CHECKPOINT")
    return time.monotonic() - started


def counted_alike(node: MtadServer) -> str | None:
    """Why the campaigns' progress (/v1/campaigns) does not add up to the spool's rows, or None."""
    listed = json.loads(called(node.admin, "GET", "/v1/campaigns"))["campaigns"]
    progress = (sum(c["messages"] for c in listed), sum(c["deliveries"] for c in listed))
    spool = tuple(int(n) for n in node.query("SELECT count(*) FROM messages WHERE campaign IS NOT NULL",
                                             "SELECT count(*) FROM deliveries WHERE campaign IS NOT NULL"))  # fmt: skip
    return None if progress == spool else f"the campaigns count {progress} (messages, deliveries), the spool {spool}"


def call(admin: str, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
    request = urllib.request.Request(f"http://{admin}{path}", method=method,
                                     data=None if body is None else json.dumps(body).encode())  # fmt: skip
    request.add_header("Authorization", f"Bearer {TOKEN}")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as refused:
        with refused:
            return refused.code, refused.read()


def called(admin: str, method: str, path: str, body: Any = None) -> bytes:
    status, answer = call(admin, method, path, body)
    if status >= 300:
        raise MtadError(f"{method} {path}: {status} {answer[:200]!r}")
    return answer


def time_reads(admin: str, rounds: int) -> list[Timed]:
    """Each read of the page, one at a time, `rounds` times in turn."""
    timed = [Timed(path) for path in PAGE_READS]
    for _ in range(rounds):
        for one in timed:
            started = time.perf_counter()
            one.size = len(called(admin, "GET", one.path))
            one.ms.append((time.perf_counter() - started) * 1000)
    return timed


def pass_ms(node: MtadServer, rounds: int) -> list[float]:
    """The overview's statement as the database runs it (EXPLAIN ANALYZE's execution time), `rounds` times."""
    text = (Path(mtad.__file__).parent / "sql" / "queue" / "overview.sql").read_text()
    text = text.replace("$1::text[]", "'{" + ",".join(queue.PENDING) + "}'::text[]")
    explained = [node.query(f"EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) {text}") for _ in range(rounds)]
    return [float(json.loads("\n".join(lines))[0]["Execution Time"]) for lines in explained]


def browser(profile: Path) -> webdriver.Chrome:
    chrome, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chrome is None or driver is None:
        raise MtadError("Debian's chromium and chromium-driver are missing: apt-get install chromium chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = chrome
    for argument in (*ARGUMENTS, f"--user-data-dir={profile}"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=Service(executable_path=driver))


MEASURED = """\
const paint = Object.fromEntries(performance.getEntriesByType('paint').map((e) => [e.name, e.startTime]));
const filled = Object.fromEntries(performance.getEntriesByType('mark').filter((e) => e.name.startsWith('filled:'))
    .map((e) => [e.name.slice(7), e.startTime]));
const resources = performance.getEntriesByType('resource');
const nav = performance.getEntriesByType('navigation')[0];
const reads = {}, bytes = {'/': nav.decodedBodySize};
for (const e of resources) {
  const path = new URL(e.name).pathname + new URL(e.name).search;
  if (path.startsWith('/v1/') && !(path in reads)) reads[path] = e.responseEnd - e.startTime;
  if (!(path in bytes)) bytes[path] = e.decodedBodySize;
}
return {paint, filled, reads, bytes};"""


def rounds(driver: webdriver.Chrome, base: str, runs: int) -> list[Load]:
    """`runs` rounds of a load that counts the queue and one answered from that count."""
    loads: list[Load] = []
    counted_at = time.monotonic()  # the login's load counted
    for _ in range(runs):
        while time.monotonic() - counted_at < status.COUNTED_FOR - IDLE:  # unrecorded, from the last count
            load(driver, base, SECTIONS, counted=False)
        time.sleep(max(0.0, counted_at + status.COUNTED_FOR + MARGIN - time.monotonic()))
        counted_at = time.monotonic()
        loads += [load(driver, base, SECTIONS, counted=True), load(driver, base, SECTIONS, counted=False)]
    return loads


def load(driver: webdriver.Chrome, base: str, sections: tuple[str, ...], counted: bool) -> Load:
    """One fresh navigation to `/`, until every section is filled."""
    driver.get(base + "/")
    selector = ", ".join(f"#{s}[data-filled]" for s in sections)
    WebDriverWait(driver, TIMEOUT).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, selector)) == len(sections))
    got = driver.execute_script(MEASURED)
    missing = [s for s in sections if s not in got["filled"]]
    if missing or "first-paint" not in got["paint"]:
        raise MtadError(f"the page did not mark {missing or 'its first paint'}")
    return Load(counted, got["paint"]["first-paint"], got["paint"].get("first-contentful-paint", float("nan")),
                got["filled"], got["reads"], got["bytes"])  # fmt: skip


def log_in(driver: webdriver.Chrome, base: str) -> None:
    wait: WebDriverWait[webdriver.Chrome] = WebDriverWait(driver, TIMEOUT)
    driver.get(base + "/")
    wait.until(shown.visibility_of_element_located((By.ID, "login")))
    driver.find_element(By.ID, "token").send_keys(TOKEN)
    driver.find_element(By.ID, "login-submit").click()
    wait.until(shown.visibility_of_element_located((By.ID, "status")))


def spread(values: list[float]) -> str:
    return " / ".join(f"{v:.0f}" for v in (min(values), statistics.median(values), max(values)))


def tables(loads: list[Load], reads: list[Timed], passes: list[float]) -> str:
    kinds = ([x for x in loads if x.counted], [x for x in loads if not x.counted])
    rows = [["first paint", *(spread([x.first_paint for x in kind]) for kind in kinds)],
            ["first contentful paint", *(spread([x.first_contentful_paint for x in kind]) for kind in kinds)],
            ["every section filled", *(spread([x.all_filled for x in kind]) for kind in kinds)]]  # fmt: skip
    rows += [[f"section `{s}` filled", *(spread([x.filled[s] for x in kind]) for kind in kinds)] for s in SECTIONS]
    page = report.markdown_table(["ms from the start of the navigation, min / median / max", "the queue counted for "
                                  "the load", f"from a count of the last {status.COUNTED_FOR:g} s"], rows)  # fmt: skip
    every = "\n".join(f"| {i // 2 + 1} | {'counted' if x.counted else 'recent'} | {x.first_paint:.0f} | "
                      f"{x.first_contentful_paint:.0f} | {x.all_filled:.0f} | "
                      + ", ".join(f"{p} {ms:.0f}" for p, ms in sorted(x.reads.items(), key=lambda r: -r[1])) + " |"
                      for i, x in enumerate(loads))  # fmt: skip
    every = ("| round | queue | first paint | first contentful | all filled | the page's reads (request to answer, ms) "
             "|\n|---|---|---|---|---|---|\n" + every)  # fmt: skip
    last = loads[-1].bytes
    files = report.markdown_table(["file", "bytes"], [[f"`{f}`", f"{last.get(f, 0):,}"] for f in FILES]
                                  + [["the three", f"{sum(last.get(f, 0) for f in FILES):,}"]])  # fmt: skip
    api = report.markdown_table(
        ["read", "first ms", "median ms of the rest", "min", "max", "answer bytes"],
        [[f"`{r.path}`", f"{r.ms[0]:.1f}", f"{statistics.median(r.ms[1:] or r.ms):.1f}", f"{min(r.ms):.1f}",
          f"{max(r.ms):.1f}", f"{r.size:,}"] for r in reads],
    )  # fmt: skip
    api += (f"\n\n`queue/overview.sql` itself (EXPLAIN ANALYZE's execution time, {len(passes)} times): "
            f"{spread(passes)} ms min / median / max.")  # fmt: skip
    return (f"### The page, loaded again and again\n\n{page}\n\n### Every load\n\n{every}\n\n"
            f"### The page's files\n\n{files}\n\n### The API's reads, one at a time\n\n{api}")  # fmt: skip


def run(args: argparse.Namespace, root: Path, versions: dict[str, str]) -> tuple[str, list[str], bool]:
    runs = args.runs or (QUICK_RUNS if args.quick else RUNS)
    turns = QUICK_READS if args.quick else READS
    messages = QUICK_MESSAGES if args.quick else MESSAGES
    notes: list[str] = []
    root.mkdir(parents=True, exist_ok=True)
    token_file = root / "admin-token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    extra = f'[admin]\nlisten = "127.0.0.1:0"\ntoken_file = "{token_file}"\n'
    with MtadServer(root / "mtad", extra=extra) as node:
        if not node.admin:
            raise MtadError("mtad's ready line has no admin address")
        node.query(f"INSERT INTO tenants (name) SELECT 't' || i FROM generate_series(0, {TENANTS - 1}) AS i")
        called(node.admin, "POST", "/v1/messages", {"from": "news@example.net", "to": ["reader@example.com"],
               "subject": "the template", "text": "hello " * 150, "tenant": "t0", "campaign": "c000"})  # fmt: skip
        print(f"filling: {CAMPAIGNS} campaigns, {messages * RECIPIENTS:,} deliveries", flush=True)
        seconds = fill(node, messages)
        for i in range(1, CAMPAIGNS, CAMPAIGNS // PAUSED):
            called(node.admin, "POST", f"/v1/campaigns/c{i:03d}/pause?tenant=t{i % TENANTS}", {"reason": "bench"})
        states = node.states()
        unlike = counted_alike(node)
        notes += [unlike] if unlike else []
        print(f"filled in {seconds:.0f} s: {states}", flush=True)
        base = f"http://{node.admin}"
        driver = browser(root / "profile")
        try:
            log_in(driver, base)
            loads = rounds(driver, base, runs)
            said = driver.get_log("browser")  # type: ignore[no-untyped-call]
        finally:
            driver.quit()
        time.sleep(status.COUNTED_FOR)  # the first read of the overview counts
        reads = time_reads(node.admin, turns)
        passes = pass_ms(node, turns)
        versions["chromium"] = (driver.capabilities or {}).get("browserVersion", "unknown")
    errors = [e["message"] for e in said if e["level"] == "SEVERE" and "401" not in e["message"]]
    if errors:
        notes.append(f"the browser's console: {errors[:3]}")
    pending = sum(n for state, n in states.items() if state not in ("delivered", "bounced"))
    md = tables(loads, reads, passes)
    print(md)
    median_paint = statistics.median(x.first_paint for x in loads)
    met = median_paint < GOAL
    filled = [statistics.median(x.all_filled for x in loads if x.counted is kind) for kind in (True, False)]
    summary = (f"Goal, first paint under {GOAL:.0f} ms with {CAMPAIGNS} campaigns and {pending:,} deliveries "
               f"not yet final: {'met' if met else 'not met'} ({median_paint:.0f} ms, median of {len(loads)} loads); "
               f"every section filled after {filled[0]:.0f} ms when the load waited for a count of the queue, "
               f"{filled[1]:.0f} ms when a count of the last {status.COUNTED_FOR:g} s answered (medians).")  # fmt: skip
    print(summary)
    values = {"MESSAGES": f"{messages:,}", "RECIPIENTS": str(RECIPIENTS), "CAMPAIGNS": str(CAMPAIGNS),
              "TENANTS": str(TENANTS), "CHUNK": f"{CHUNK:,}", "QUEUED": f"{pending:,}",
              "SETTLED": f"{messages * RECIPIENTS - pending:,}", "DOMAINS": str(len(DOMAINS)),
              "PROVIDERS": str(PROVIDERS), "PAUSED": str(PAUSED), "RUNS": str(runs), "READS": str(turns),
              "COUNTED_FOR": f"{status.COUNTED_FOR:g}",
              "GOAL": f"{GOAL:.0f}"}  # fmt: skip
    spool = ", ".join(f"{state} {n:,}" for state, n in sorted(states.items()))
    body = (f"### Method\n\n{report.filled(__doc__, values).strip()}\n\nThe spool: {spool} (filled in "
            f"{seconds:.0f} s); the campaigns' progress (`/v1/campaigns`) adds up to its messages and deliveries"
            f"{' (not: see the notes)' if unlike else ''}.\n\n{md}\n\n{summary}")  # fmt: skip
    return body, notes, met and not notes

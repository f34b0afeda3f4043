"""Instructions per request, counted by valgrind: `scripts/bench --instructions` (issue 44).

Time on these shared virtual machines moves by 10-40 % between runs of the same binary; the
number of instructions a process executes for a request does not. Each target runs under
`valgrind --tool=callgrind` (every instruction of every thread counted; valgrind runs one thread
at a time, so the count does not depend on how threads were scheduled). For each scenario, on one
keep-alive connection, one request after another:

  1. `--warmup` requests (connections, pools, caches, the allocator's pages, lazy statics);
  2. the target's counters are zeroed (`callgrind_control -z`);
  3. `--requests` requests; then the target is left `SETTLE_S` seconds to finish what a call
     leaves behind (its settlement: the usage event drained into SQLite by the embedded settler);
  4. the counters are dumped (`callgrind_control -d`) and read: instructions (`Ir`) and calls to
     the allocator (`__rust_alloc`, `__rust_alloc_zeroed`, `__rust_realloc`; `malloc`,
     `calloc`, `realloc` for code that is not Rust), each divided by the requests.

What runs on timers whatever the traffic (the reconciler, the balance watcher) is set to run
once an hour in the gateway's configuration here, so the count is the requests' own.

Targets: `tollgate` (the embedded default: key check, inspection, hold, metering, settlement into
SQLite, its log line per request), `tollgate-redis` (the same on REDIS_URL's Redis, only when set),
`pingora` (bare Pingora, `app/examples/bare_pingora.rs`) and `nginx` (one process, no master).
The mock supplier runs natively.

Scenarios: `chat`; `stream-20` (20 events); `messages-stream-20` (a Messages client served by the
OpenAI-format account: translated event by event; gateways only); `image` (one generated image,
base64; gateways only, where an image model is configured); `refused` (a model nobody serves:
404 after the key check and the body's inspection, before any supplier; gateways only).

Each figure is the instructions of the gateway's request path: every thread but the
settlement's (the embedded settler and the SQLite connections' threads, whose batches follow
the clock: their figure, reported beside, moves by about 10 % between runs) and Pingora's clock
thread (it ticks with time). So measured, three runs agree within 0.3 % (README "Performance").
Allocations are the calls to the allocator made by those same threads.

`--gate FILE` compares the gateway's figures with FILE (`bench/instructions-baseline.json`) and
fails (exit 1) when a scenario costs more than `--tolerance` percent (3) over it. On the
baseline's environment (CPU model, glibc, valgrind, rustc: `environment`) the instructions are
compared; on another, the gateway's multiple of bare Pingora's, measured in the same run, which
cancels most of what a machine or a toolchain changes. `--write FILE` writes a new baseline.
"""

from __future__ import annotations

import datetime
import http.client
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

SETTLE_S = 1.5
# Allocator entry points, counted where they are called (Rust's shims carry a `__rustc::` path).
ALLOC_RUST = ("__rust_alloc", "__rust_alloc_zeroed", "__rust_realloc")
ALLOC_C = ("malloc", "calloc", "realloc")
# The bench's gateway configuration, with the background timers moved out of the window and an
# image model on the steady account.
TIMERS = """
[money]
reconcile_interval_ms = 3600000
watch_interval_ms = 3600000
"""
IMAGE_MODEL = """
[[models]]
id = "gpt-image-1"
family = "gpt-image"
kind = "image"
per_image = 0.01

[[accounts]]
id = "images"
provider = "openai"
base_url = "http://127.0.0.1:{mock}/v1"
api_key = "sk-bench"
models = ["gpt-image-1"]
capabilities = ["image_generation"]
max_concurrency = 10000
"""


def valgrind(out: Path, name: str) -> list[str]:
    """The prefix that runs a target under callgrind, its dumps in `out`."""
    return ["valgrind", "--tool=callgrind", "--dump-instr=no", "--compress-strings=no",
            "--separate-threads=yes",
            "--compress-pos=no", f"--callgrind-out-file={out / name}.cg",
            # The dumps come when asked for (callgrind_control), not at exit only.
            "--vgdb=yes"]


def ensure_valgrind(say) -> None:
    if shutil.which("valgrind") and shutil.which("callgrind_control"):
        return
    say("installing valgrind from the distribution's packages")
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(sudo + ["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(sudo + ["apt-get", "install", "-y", "-qq", "valgrind"], check=True, env=env,
                   stdout=subprocess.DEVNULL)


def read_dump(path: Path) -> tuple[int, int, str]:
    """One thread's dump: its instructions (the `summary:`/`totals:` line), its calls to the
    allocator, and its role: `ledger` (the settlement: the embedded settler and the SQLite
    connections' threads), `clock` (Pingora's clock thread, which ticks with time, not with
    requests) or `request` (everything else: the service thread, the log writer)."""
    total = allocs = 0
    role = "request"
    callee = None
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith(("summary:", "totals:")):
            total = max(total, int(line.split()[1]))
        elif line.startswith(("fn=", "cfn=")):
            name = line.split("=", 1)[1].strip()
            if "admin_api::workers::" in name or "sqlx_sqlite::" in name:
                role = "ledger"
            elif "TimerManager::clock_thread" in name and role == "request":
                role = "clock"
            callee = name.removeprefix("__rustc::") if line.startswith("cfn=") else None
        elif line.startswith("calls=") and callee is not None:
            if callee in ALLOC_RUST or callee in ALLOC_C:
                allocs += int(line[6:].split()[0])
            callee = None
    return total, allocs, role


class Counted:
    """A target running under callgrind (one dump file per thread): its counters zeroed and
    dumped on demand."""

    def __init__(self, target, out: Path):
        self.target, self.out = target, out

    def _control(self, flag: str) -> None:
        pid = str(self.target.proc.p.pid)
        r = subprocess.run(["callgrind_control", flag, pid], capture_output=True, text=True,
                           timeout=120)
        if r.returncode != 0:
            raise SystemExit(f"callgrind_control {flag} {pid}: {r.stdout}{r.stderr}")

    def _files(self) -> set[Path]:
        return set(self.out.glob(f"{self.target.name}.cg*"))

    def zero(self) -> None:
        self._control("-z")

    def dump(self) -> dict[str, tuple[int, int]]:
        """Instructions and allocator calls since the last zero, summed by thread role."""
        before = self._files()
        self._control("-d")
        deadline = time.monotonic() + 60
        new: set[Path] = set()
        while time.monotonic() < deadline:
            now = {p for p in self._files() - before if p.stat().st_size > 0}
            if now and now == new:
                break  # every thread's file is written
            new = now
            time.sleep(0.5)
        if not new:
            raise SystemExit(f"{self.target.name}: no callgrind dump after 60 s")
        roles: dict[str, tuple[int, int]] = {}
        for path in new:
            total, allocs, role = read_dump(path)
            t, a = roles.get(role, (0, 0))
            roles[role] = (t + total, a + allocs)
        return roles


def request(conn: http.client.HTTPConnection, path: str, body: bytes, headers: dict) -> int:
    conn.request("POST", path, body=body, headers=headers)
    r = conn.getresponse()
    r.read()
    return r.status


def scenarios(bench) -> list[dict]:
    stream_h = {"x-mock-events": str(bench.EVENTS)}
    image = json.dumps({"model": "gpt-image-1", "prompt": "a red fox", "n": 1,
                        "response_format": "b64_json"}).encode()
    return [
        {"name": "chat", "body": bench.chat_body(False), "status": 200},
        {"name": "stream-20", "body": bench.chat_body(True), "headers": stream_h,
         "status": 200},
        {"name": "messages-stream-20", "body": bench.messages_body(True), "gateway_only": True,
         "headers": {**stream_h, "anthropic-version": "2023-06-01"}, "path": "/v1/messages",
         "status": 200},
        {"name": "image", "body": image, "gateway_only": True, "status": 200,
         "route": "/images/generations"},
        {"name": "refused", "body": bench.chat_body(False, model="no-such-model"),
         "gateway_only": True, "status": 404},
    ]


def run_scenario(counted: Counted, sc: dict, warmup: int, requests: int) -> dict:
    t = counted.target
    headers = {"Content-Type": "application/json", **sc.get("headers", {})}
    key = sc.get("key", t.key)
    if key:
        headers["Authorization"] = f"Bearer {key}"
    path = sc.get("path") or t.url(sc.get("route", "/chat/completions")).split(
        f":{t.port}", 1)[1]
    conn = http.client.HTTPConnection("127.0.0.1", t.port, timeout=300)
    for i in range(warmup):
        status = request(conn, path, sc["body"], headers)
        if status != sc["status"]:
            raise SystemExit(f"{t.name}/{sc['name']}: warm-up request {i} answered {status}, "
                             f"not {sc['status']}")
    time.sleep(SETTLE_S)
    counted.zero()
    started = time.monotonic()
    for _ in range(requests):
        request(conn, path, sc["body"], headers)
    took = time.monotonic() - started
    time.sleep(SETTLE_S)
    roles = counted.dump()
    conn.close()
    req, req_allocs = roles.get("request", (0, 0))
    ledger, _ = roles.get("ledger", (0, 0))
    return {"scenario": sc["name"], "target": t.name, "requests": requests,
            "instructions_per_req": round(req / requests),
            "settlement_per_req": round(ledger / requests),
            "allocs_per_req": round(req_allocs / requests, 1),
            "seconds_under_valgrind": round(took, 1)}


def start_nginx(bench, work: Path, mock: int, prefix: list[str]):
    """nginx as one process (no master, no worker to fork) so valgrind counts all of it."""
    port = bench.free_port()
    d = work / "nginx"
    d.mkdir(exist_ok=True)
    for sub in ["body", "proxy", "fastcgi", "uwsgi", "scgi"]:
        (d / sub).mkdir(exist_ok=True)
        (d / sub).chmod(0o777)
    conf = d / "nginx.conf"
    conf.write_text(bench.NGINX_CONFIG.format(dir=d, mock=mock, port=port))
    proc = bench.Proc("nginx", prefix + [bench.nginx_bin(), "-p", str(d), "-c", str(conf), "-g",
                                         "daemon off; master_process off;"], d / "stdout.log")
    bench.wait_port(port, 120)
    return bench.Target("nginx", "nginx", port, "/compat/v1", proc)


def start_gateway(bench, name: str, work: Path, bins: Path, mock: int, prefix: list[str],
                  redis_url: str | None):
    """The bench's gateway with the timers out of the window and an image model; waits up to
    2 minutes (valgrind starts it slowly)."""
    original = bench.GATEWAY_CONFIG
    bench.GATEWAY_CONFIG = original.replace(
        'models = ["gpt-4o-mini", "failover-model"]\nwholesale_rate_multiplier',
        'models = ["gpt-4o-mini", "failover-model", "gpt-image-1"]\nwholesale_rate_multiplier')
    real_wait = bench.wait_port
    bench.wait_port = lambda port, timeout=120.0: real_wait(port, max(timeout, 120.0))
    try:
        extra = accepted(bench, work, bins, TIMERS + IMAGE_MODEL.format(mock=mock), mock)
        return bench.start_gateway(name, work, bins, mock, mock, prefix, redis_url, extra=extra)
    finally:
        bench.GATEWAY_CONFIG = original
        bench.wait_port = real_wait


def accepted(bench, work: Path, bins: Path, extra: str, mock: int) -> str:
    """`extra` without the settings an earlier commit's gateway does not know (`--bins`): each
    line its `proxy --check` names as an unknown field is dropped."""
    probe = work / "probe.toml"
    for _ in range(len(extra.splitlines())):
        probe.write_text(bench.GATEWAY_CONFIG.format(
            port=1, metrics=2, db=work / "probe.db", redis="", mock=mock, flaky=mock,
            server_extra="", extra=extra))
        r = subprocess.run([str(bins / "proxy"), "--config", str(probe), "--check"],
                           capture_output=True, text=True)
        m = re.search(r"\.(\w+): unknown field", r.stdout + r.stderr)
        if r.returncode == 0 or not m:
            return extra
        extra = "\n".join(line for line in extra.splitlines()
                          if not line.startswith(f"{m.group(1)} ="))
    return extra


def main(bench, args) -> None:
    say = bench.say
    ensure_valgrind(say)
    gate = bool(args.gate)
    if not gate:
        bench.ensure_tools()  # nginx
    if not args.no_build and not args.bins:
        say("building release binaries (proxy, admin-api, mock-supplier, bare_pingora)")
        subprocess.run(["cargo", "build", "--release", "--bins", "-p", "tollgate", "--example",
                        "bare_pingora", "-p", "mock-supplier"], cwd=bench.ROOT, check=True)
    bins = Path(args.bins) if args.bins else bench.ROOT / "target" / "release"
    work = Path(bench.tempfile.mkdtemp(prefix="tollgate-instructions-"))
    out = work / "callgrind"
    out.mkdir()
    procs = []
    rows: list[dict] = []
    try:
        mock_port = bench.free_port()
        mock = bench.Proc("mock", [str(bins / "mock-supplier"), "--listen",
                                   f"127.0.0.1:{mock_port}"], work / "mock.log")
        procs.append(mock)
        bench.wait_port(mock_port)
        starts = [("tollgate", lambda p: start_gateway(bench, "tollgate", work, bins, mock_port,
                                                         p, None))]
        redis_url = os.environ.get("REDIS_URL")
        if redis_url:
            starts.append(("tollgate-redis", lambda p: start_gateway(
                bench, "tollgate-redis", work, bins, mock_port, p, redis_url)))
        # Bare Pingora in the gate too: on another machine or toolchain the gate compares the
        # gateway's cost relative to it (see `check`).
        starts.append(("pingora", lambda p: bench.start_bare(bins, work, mock_port, p)))
        if not gate:
            starts.append(("nginx", lambda p: start_nginx(bench, work, mock_port, p)))
        only = set(args.only.split(",")) if args.only else None
        for name, start in starts:
            say(f"starting {name} under valgrind")
            target = start(valgrind(out, name))
            procs.append(target.proc)
            counted = Counted(target, out)
            for sc in scenarios(bench):
                if only and sc["name"] not in only:
                    continue
                if sc.get("gateway_only") and target.kind != "gateway":
                    continue
                say(f"{name}: {sc['name']} ({args.warmup} + {args.requests} requests)")
                rows.append(run_scenario(counted, sc, args.warmup, args.requests))
            target.proc.stop()
    finally:
        for p in reversed(procs):
            p.stop()
        if os.environ.get("BENCH_KEEP") != "1":
            shutil.rmtree(work, ignore_errors=True)
        else:
            say(f"kept {work}")
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": bench.commit(), "environment": environment(),
            "warmup": args.warmup, "requests": args.requests}
    print(report(rows, meta))
    if args.write:
        Path(args.write).write_text(json.dumps(baseline_of(rows, meta), indent=2) + "\n")
        say(f"written {args.write}")
    if gate:
        failed = check(rows, json.loads(Path(args.gate).read_text()), args.tolerance)
        for line in failed:
            say(line)
        if failed:
            raise SystemExit(1)
        say(f"instruction gate: every scenario within {args.tolerance} % of {args.gate}")


def environment() -> dict:
    """What an instruction count depends on besides the code: the CPU (glibc picks its memcpy by
    the CPU's features, as valgrind reports them), glibc, valgrind and the compiler."""
    def first(argv: list[str]) -> str:
        r = subprocess.run(argv, capture_output=True, text=True)
        return (r.stdout or r.stderr).splitlines()[0].strip() if (r.stdout or r.stderr) else ""
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    return {"cpu": cpu, "glibc": first(["ldd", "--version"]),
            "valgrind": first(["valgrind", "--version"]), "rustc": first(["rustc", "-V"])}


def baseline_of(rows: list[dict], meta: dict) -> dict:
    """The gateway's figures, each also as a multiple of bare Pingora's on the same scenario
    (for those Pingora does not run: its stream-20 for a stream, its chat for the others)."""
    pingora = {r["scenario"]: r["instructions_per_req"] for r in rows if r["target"] == "pingora"}
    scenarios = {}
    for r in rows:
        if not r["target"].startswith("tollgate"):
            continue
        like = "stream-20" if "stream" in r["scenario"] else "chat"
        base = pingora.get(r["scenario"]) or pingora.get(like)
        scenarios[f"{r['target']}/{r['scenario']}"] = {
            "instructions": r["instructions_per_req"],
            "per_pingora": round(r["instructions_per_req"] / base, 4) if base else None}
    return {"meta": meta, "scenarios": scenarios}


def check(rows: list[dict], baseline: dict, tolerance: float) -> list[str]:
    """The scenarios that cost more than `tolerance` percent over the baseline, and those the
    baseline has that were not measured. On the baseline's environment (CPU, glibc, valgrind,
    compiler) the instructions are compared; on another, their multiple of bare Pingora's
    (measured in the same run), which cancels what the machine and the toolchain change for
    both."""
    now = baseline_of(rows, {})["scenarios"]
    same = baseline.get("meta", {}).get("environment") == environment()
    if not same:
        print(f"instruction gate: the baseline was measured on {baseline['meta'].get('environment')}"
              f", this is {environment()}: comparing multiples of bare Pingora")
    failed = []
    for key, base in baseline["scenarios"].items():
        got = now.get(key)
        if got is None:
            if key.split("/")[0] in {r["target"] for r in rows}:
                failed.append(f"instruction gate: {key} was not measured")
            continue
        field = "instructions" if same else "per_pingora"
        if base.get(field) is None or got.get(field) is None:
            continue
        change = 100.0 * (got[field] - base[field]) / base[field]
        verdict = "OVER" if change > tolerance else "ok"
        line = (f"{key}: {got['instructions']:,} instructions per request "
                f"({got['per_pingora']}x bare Pingora); baseline {base['instructions']:,} "
                f"({base['per_pingora']}x): {change:+.2f} % of {field} {verdict}")
        print(line)
        if change > tolerance:
            failed.append(f"instruction gate: {line}")
    return failed


def report(rows: list[dict], meta: dict) -> str:
    lines = [f"Instructions per request (valgrind callgrind), {meta['date']}, commit "
             f"{meta['commit']}, {meta['environment']['valgrind']}, {meta['warmup']} warm-up + "
             f"{meta['requests']} measured requests per scenario on one connection", "",
             "| scenario | target | instructions / request | allocations / request | "
             "settlement instructions / request |",
             "|---|---|---:|---:|---:|"]
    for r in rows:
        settle = f"{r['settlement_per_req']:,}" if r["settlement_per_req"] else "-"
        lines.append(f"| {r['scenario']} | {r['target']} | {r['instructions_per_req']:,} | "
                     f"{r['allocs_per_req']} | {settle} |")
    return "\n".join(lines) + "\n"

"""The guide followed as a user follows it, from the built wheel (`make wheel-check`).

    .venv/bin/python -m scripts.wheel_story [--keep]

1. Builds the wheel from the working tree (its tracked and unignored files, copied to a
   temporary folder, so nothing stale from an earlier build slips in).
2. In a new folder outside the repository, runs the guide's set-up commands (section 1:
   a new virtualenv, `pip install` of the wheel: no editable install, no test extra)
   and writes the guide's files as the guide shows them (docs/guide.md, not examples/).
3. Runs the guide's story there with the base install: the source, the definitions as
   `dagster dev` loads them, the first run, the change and the incremental run, the
   reprocess from a shell (answering its prompt) and the command line.
4. Section 12 with the base install: the components project `examples/components/shop/`,
   copied out of the clone as a user takes it, listed and checked by the virtualenv's
   `dg` (a mistake said in one line naming its file and key), and its assets run by
   `dagster asset materialize` as `offset-assets ranges plan` prints them.
5. Installs the `[kafka]` extra with the guide's command and runs section 11's Kafka
   example against a local broker (noida-db, the binary the test extra installs into
   this project's environment; only the broker runs from there), then the same pipeline
   as the components project `examples/components/kafka_events/`.

Every command of the user's runs with the new virtualenv's programs, from the new folder,
in an environment without this project's settings (PYTHONPATH, OFFSET_ASSETS_*,
DAGSTER_HOME, ...). Each check is printed as it passes; the first that fails ends the
story with exit status 1, the failing command's output and the folder, which is kept
(`--keep` keeps it after a success too).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "guide.md"
# A code block the guide takes from a file, as tests/test_guide.py reads them.
FILE_BLOCK = re.compile(r"^<!-- file: (\S+) -->\n```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)
SH_BLOCK = re.compile(r"^```sh\n(.*?)^```$", re.MULTILINE | re.DOTALL)
# What the guide's install commands name, replaced by the wheel just built.
PACKAGE_PLACEHOLDER = "/path/to/offset-assets"
COMMAND_TIMEOUT_S = 900
# The guide's customers are stamped "now" and ingested as today's window (UTC): a story
# that crossed midnight would see its rows in yesterday's window.
STORY_MARGIN = timedelta(minutes=15)
TOPIC = "order-events"


class StoryFailed(Exception):
    """A check failed: what was expected, and what was seen."""


class Story:
    """The folder outside the repository, the environment of its commands, and the checks."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.shop = work / "shop"
        self.logs = work / "logs"
        self.logs.mkdir(parents=True)
        self.guide = GUIDE.read_text()
        self.commands = 0
        self.env = user_environment(self.shop)

    def check(self, what: str, ok: bool, seen: object = "") -> None:
        if not ok:
            raise StoryFailed(f"{what}: saw {seen!r}")
        print(f"  ok  {what}", flush=True)

    def shown(self, command: str) -> str:
        """`command`, checked to be what the guide tells the user to type."""
        if command not in self.guide:
            raise StoryFailed(f"docs/guide.md does not show the command {command!r}")
        return command

    def run(self, command: str, *, input: str | None = None, env: dict[str, str] | None = None,
            cwd: Path | None = None, exit_status: int = 0) -> str:
        """`command` through bash in the shop folder; its output, or StoryFailed with its
        tail when it exits other than `exit_status`."""
        self.commands += 1
        log = self.logs / f"{self.commands:02d}.log"
        started = time.monotonic()
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", command], cwd=cwd or self.shop,
                              env={**self.env, **(env or {})}, input=input, capture_output=True,
                              text=True, timeout=COMMAND_TIMEOUT_S)
        log.write_text(f"$ {command}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}")
        shown = command if "\n" not in command else f"{command.splitlines()[0]} ... ({log})"
        print(f"  $ {shown}   ({time.monotonic() - started:.0f} s, exit {done.returncode})", flush=True)
        if done.returncode != exit_status:
            raise StoryFailed(f"{command!r} exited {done.returncode}, not {exit_status}; its output ({log}):\n"
                              f"{done.stdout[-3000:]}\n{done.stderr[-5000:]}")
        return done.stdout

    def guide_block(self, section: str) -> str:
        """The first shell block of the guide's `section` (a heading's text)."""
        start = self.guide.index(f"\n## {section}")
        block = SH_BLOCK.search(self.guide, start)
        if block is None:
            raise StoryFailed(f"docs/guide.md has no shell block in {section!r}")
        return block.group(1)

    def write_guide_files(self, example: str, package: str) -> list[str]:
        """The files of `examples/<example>/` as the guide shows them, written into the
        user's package folder `package/`; their names."""
        blocks: dict[str, list[str]] = defaultdict(list)
        for path, code in FILE_BLOCK.findall(self.guide):
            if path.startswith(f"examples/{example}/"):
                blocks[Path(path).name].append(code)
        folder = self.shop / package
        folder.mkdir(exist_ok=True)
        (folder / "__init__.py").touch()
        for name, parts in blocks.items():
            (folder / name).write_text("\n\n".join(parts))
        return sorted(blocks)


def user_environment(shop: Path) -> dict[str, str]:
    """This process's environment without what points at the repository or its settings."""
    dropped = ("PYTHON", "VIRTUAL_ENV", "OFFSET_ASSETS_", "DAGSTER_", "PYSPARK_", "SPARK_", "SHOP_",
               "KAFKA_", "ORDER_EVENTS_")
    env = {name: value for name, value in os.environ.items() if not name.startswith(dropped)}
    env["PATH"] = os.pathsep.join(entry for entry in env.get("PATH", "").split(os.pathsep)
                                  if entry and not Path(entry).resolve().is_relative_to(ROOT))
    env["DAGSTER_HOME"] = str(shop / "dagster_home")  # what the guide's `export` sets
    return env


def build_wheel(work: Path) -> Path:
    """The wheel of the working tree: its tracked and unignored files, built in a copy."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout
    source = work / "source"
    for name in filter(None, listed.split("\0")):
        path = ROOT / name
        if path.is_file():  # a file deleted in the working tree is still in the index
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, source / name)
    dist = work / "dist"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(dist),
                            str(source)], capture_output=True, text=True)
    if built.returncode != 0:
        raise StoryFailed(f"pip wheel failed:\n{built.stdout[-3000:]}\n{built.stderr[-3000:]}")
    [wheel] = dist.glob("offset_assets-*.whl")
    return wheel


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def reports(output: str) -> dict[str, object]:
    """`name {python literal}` lines of a run script's output, by name."""
    found = {}
    for line in output.splitlines():
        match = re.fullmatch(r"(\w+) ([\[{].*[\]}])", line.strip())
        if match:
            found[match.group(1)] = ast.literal_eval(match.group(2))
    return found


def wait_for_a_whole_story_before_midnight() -> None:
    now = datetime.now(UTC)
    midnight = (now + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    if midnight - now < STORY_MARGIN:
        wait = (midnight - now).total_seconds() + 5
        print(f"waiting {wait:.0f} s for midnight UTC: the guide ingests today's window of customers", flush=True)
        time.sleep(wait)


def set_up(story: Story, wheel: Path) -> dict[str, float]:
    print("\nsection 1: a new folder and virtualenv, the wheel installed as the guide says", flush=True)
    block = story.guide_block("1. Set up the folder")
    story.check("the guide installs the package with pip", f"pip install {PACKAGE_PLACEHOLDER}" in block, block)
    started = time.monotonic()
    story.run(block.replace(PACKAGE_PLACEHOLDER, str(wheel)), cwd=story.work)
    seconds = time.monotonic() - started
    venv = story.shop / ".venv"
    located = story.run('.venv/bin/python -c "import offset_assets; print(offset_assets.__file__)"').strip()
    story.check("offset_assets is imported from the new virtualenv, not the repository",
                Path(located).is_relative_to(venv) and not Path(located).is_relative_to(ROOT), located)
    missing = story.run(".venv/bin/python -c 'import importlib.util as u; "
                        "print([m for m in (\"pytest\", \"noida_db\", \"confluent_kafka\") if u.find_spec(m)])'")
    story.check("no test extra and no kafka extra in the base install", missing.strip() == "[]", missing)
    pandas = story.run(".venv/bin/python -c 'import pandas; print(pandas.__version__)'").strip()
    story.check(f"pandas {pandas} installed, below 3 (what PySpark 4 supports)", pandas.split(".")[0] == "2", pandas)
    return {"seconds": seconds, "bytes": du(venv)}


def first_pipeline(story: Story) -> None:
    print("\nsections 2-10: the guide's pipeline with the base install", flush=True)
    written = story.write_guide_files("first_pipeline", "first_pipeline")
    story.check("the guide's files written into first_pipeline/", written == ["definitions.py", "run.py", "source.py"],
                written)
    wait_for_a_whole_story_before_midnight()
    story.run(story.shown(".venv/bin/python -m first_pipeline.source"))
    story.check("shop.db created", (story.shop / "shop.db").is_file())
    # What `dagster dev -m first_pipeline.definitions` loads (section 6).
    story.shown("dagster dev -m first_pipeline.definitions")
    story.run(".venv/bin/dagster definitions validate -m first_pipeline.definitions")

    first = reports(story.run(story.shown(".venv/bin/python -m first_pipeline.run")))
    story.check("the first run processes every key (section 6)",
                {asset: (r["mode"], r["processed_keys"]) for asset, r in first.items()} == {
                    "enriched_orders": ("incremental", 6), "revenue_by_country": ("incremental", 3),
                    "large_orders": ("incremental", 6), "small_orders": ("incremental", 6)}, first)

    story.run(story.shown(".venv/bin/python -m first_pipeline.source change"))
    second = reports(story.run(".venv/bin/python -m first_pipeline.run"))
    story.check("the second run processes only the affected keys (section 7)",
                {asset: (r["mode"], r["changed_keys"], r["processed_keys"]) for asset, r in second.items()} == {
                    "enriched_orders": ("incremental", 3, 3), "revenue_by_country": ("incremental", 3, 3),
                    "large_orders": ("incremental", 2, 2), "small_orders": ("incremental", 2, 2)}, second)

    prompt = "Reprocess every key of 'revenue_by_country' on its next run and delete these offsets? [y/N]"
    declined = story.run(story.shown(".venv/bin/offset-assets reprocess revenue_by_country"), input="\n",
                         exit_status=1)
    story.check("reprocess asks first and does nothing when not answered y (section 8)",
                prompt in declined and prompt in story.guide and "requested" not in declined, declined)
    answered = story.run(".venv/bin/offset-assets reprocess revenue_by_country", input="y\n")
    story.check("answered y, reprocess deletes the offset and requests the reprocess",
                "reset revenue_by_country / enriched_orders" in answered and "reprocess requested" in answered,
                answered)
    story.run(story.shown(".venv/bin/dagster asset materialize -m first_pipeline.definitions "
                          "--select revenue_by_country"))

    offsets = story.run(story.shown(".venv/bin/offset-assets offsets"))
    pairs = {tuple(line.split()[:2]) for line in offsets.splitlines()[1:]}
    story.check("offsets: every transformation and input, revenue_by_country's again after its reprocess (section 9)",
                pairs == {("enriched_orders", "customers"), ("enriched_orders", "orders"),
                          ("order_sizes", "orders"), ("revenue_by_country", "enriched_orders")}, offsets)
    story.run(story.shown(".venv/bin/offset-assets jobs"))
    jobs = story.run(".venv/bin/offset-assets jobs orders --json")
    story.check("jobs: the two id ranges of orders",
                [(r["data_range_start"], r["data_range_end"], r["status"]) for r in map(json.loads, jobs.splitlines())]
                == [("6", "8", "SUCCESS"), ("0", "6", "SUCCESS")], jobs)
    story.run(story.shown(".venv/bin/offset-assets deltas revenue_by_country"))
    deltas = story.run(".venv/bin/offset-assets deltas revenue_by_country --json")
    story.check("deltas: one per run; the reprocess recomputed every country to the values it had",
                [(d["delta_num"], d["status"], d["rows_upserted"]) for d in map(json.loads, deltas.splitlines())]
                == [(3, "committed", 0), (2, "committed", 3), (1, "committed", 3)], deltas)


def components_project(story: Story, name: str) -> Path:
    """`examples/components/<name>/` copied out of the clone, with a Dagster instance of
    its own (its control plane and warehouse go to its ./state, the defaults)."""
    project = story.work / "components" / name
    shutil.copytree(ROOT / "examples" / "components" / name, project,
                    ignore=shutil.ignore_patterns("__pycache__", "state", ".dagster_home", "dagster_home"))
    (project / "dagster_home").mkdir()
    (project / "dagster_home" / "dagster.yaml").touch()
    return project


def run_planned_ranges(story: Story, project: Path, module: str, asset: str, env: dict[str, str]) -> list[str]:
    """`offset-assets ranges plan ASSET` and the commands it prints, run in order; their keys."""
    venv = story.shop / ".venv" / "bin"
    printed = story.run(f"{venv}/offset-assets ranges plan {asset} -m {module}", cwd=project, env=env)
    commands = [line for line in printed.splitlines() if line.startswith("dagster asset materialize")]
    for command in commands:
        story.run(f"{venv}/{command}", cwd=project, env=env)
    return [command.split("--partition ")[1].strip("'") for command in commands]


def dg_checks(story: Story, project: Path, assets: list[str], env: dict[str, str] | None = None) -> None:
    """`dg list defs` and `dg check defs` from the project's folder, with the virtualenv's `dg`."""
    venv = story.shop / ".venv" / "bin"
    listed = json.loads(story.run(f"{venv}/dg list defs --json", cwd=project, env=env))
    story.check(f"dg list defs lists {', '.join(assets)}",
                sorted(a["asset_key"] for a in listed["assets"]) == sorted(assets), listed["assets"])
    checked = story.run(f"{venv}/dg check defs 2>&1", cwd=project, env=env)
    story.check("dg check defs loads every component", "All definitions loaded successfully." in checked, checked)


def shop_components(story: Story) -> None:
    print("\nsection 12: the shop as Dagster components, with the base install", flush=True)
    story.shown("cd examples/components/shop")
    project = components_project(story, "shop")
    env = {"DAGSTER_HOME": str(project / "dagster_home"),
           "SHOP_SOURCE_URL": f"sqlite:///{story.shop / 'shop.db'}",
           "SHOP_LIVE_SINCE": datetime.now(UTC).strftime("%Y-%m-%d")}
    dg_checks(story, project, ["customers", "enriched_orders", "large_orders", "orders", "revenue_by_country",
                               "small_orders"], env)

    orders = project / "shop_components" / "defs" / "orders" / "defs.yaml"
    text = orders.read_text()
    orders.write_text(text.replace("      amount_cents: long\n", "      amount_cents: lnog\n"))
    refused = story.run(f"{story.shop / '.venv' / 'bin'}/dg check defs 2>&1", cwd=project, env=env, exit_status=1)
    said = (f"{orders}:17 - attributes.target.columns.amount_cents: 'lnog' is not a Spark type "
            "(`<type> [not null]`: long, string, double, boolean, date, timestamp, decimal(10,2), ...)")
    story.check("a column type Spark does not know: one line naming the file, line and key",
                any(line.endswith(said) for line in refused.splitlines()), refused[-3000:])
    orders.write_text(text)

    venv = story.shop / ".venv" / "bin"
    story.check("the orders' id range is planned and ingested",
                run_planned_ranges(story, project, "shop_components.definitions", "orders", env) == ["id:0-8"])
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    story.run(f"{venv}/dagster asset materialize -m shop_components.definitions --select customers "
              f"--partition {today}", cwd=project, env=env)
    story.run(f"{venv}/dagster asset materialize -m shop_components.definitions "
              "--select enriched_orders,revenue_by_country,large_orders,small_orders", cwd=project, env=env)
    offsets = story.run(f"{venv}/offset-assets offsets", cwd=project, env=env)
    pairs = {tuple(line.split()[:2]) for line in offsets.splitlines()[1:]}
    story.check("the components' transformations ran and committed their offsets",
                pairs == {("enriched_orders", "customers"), ("enriched_orders", "orders"),
                          ("order_sizes", "orders"), ("revenue_by_country", "enriched_orders")}, offsets)


def install_kafka_extra(story: Story, wheel: Path) -> dict[str, float]:
    print("\nsection 11: the [kafka] extra, installed as the guide says", flush=True)
    block = story.guide_block("11. A Kafka topic as a source")
    story.check("the guide installs the kafka extra", f'pip install "{PACKAGE_PLACEHOLDER}[kafka]"' in block, block)
    started = time.monotonic()
    story.run(block.replace(PACKAGE_PLACEHOLDER, str(wheel)))
    seconds = time.monotonic() - started
    installed = story.run(".venv/bin/python -c 'from importlib.metadata import version; "
                          "print(version(\"confluent-kafka\"))'")
    story.check(f"confluent-kafka {installed.strip()} installed", bool(installed.strip()), installed)
    return {"seconds": seconds, "bytes": du(story.shop / ".venv")}


@contextlib.contextmanager
def kafka_broker(story: Story) -> Iterator[object]:
    """A local broker (the test extra's noida-db binary) holding the topic; its address."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.kafka_broker import KafkaBroker, noida_binary

    broker = KafkaBroker(noida_binary(), story.work / "kafka" / "data")
    broker.data_dir.parent.mkdir(parents=True)
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(10)
        yield broker
    finally:
        broker.stop()


def send_orders(broker, partition: int, orders: list[tuple[int, int, int]]) -> None:
    broker.produce(TOPIC, [json.dumps({"order_id": o, "customer_id": c, "amount_cents": a}) for o, c, a in orders],
                   partition=partition)


def kafka_events(story: Story, broker) -> None:
    written = story.write_guide_files("kafka_events", "kafka_events")
    story.check("the guide's files written into kafka_events/", written == ["definitions.py", "run.py"], written)
    for partition, orders in [(0, [(1, 7, 1000), (2, 8, 500)]), (1, [(3, 7, 250)])]:
        send_orders(broker, partition, orders)
    env = {"KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap_servers, "ORDER_EVENTS_TOPIC": TOPIC}
    run = story.shown(".venv/bin/python -m kafka_events.run")
    first = story.run(run, env=env)
    story.check("the first range is kafka:earliest, and the guide shows this run's output",
                all(line in story.guide for line in first.strip().splitlines())
                and reports(first)["ingested"] == ["kafka:earliest"], first)

    send_orders(broker, 1, [(4, 9, 300), (5, 8, 100)])
    second = reports(story.run(run, env=env))
    story.check("the next range starts where the first ended; only customers 8 and 9 are recomputed",
                second == {"ingested": [f"kafka:{TOPIC}/0@2,{TOPIC}/1@1"], "customer_totals": {
                    "mode": "incremental", "changed_keys": 2, "processed_keys": 2}}
                and f"kafka:{TOPIC}/0@2,{TOPIC}/1@1" in story.guide, second)


def kafka_components(story: Story, broker) -> None:
    print("\nsection 12: the Kafka pipeline as Dagster components, with the [kafka] extra", flush=True)
    project = components_project(story, "kafka_events")
    env = {"DAGSTER_HOME": str(project / "dagster_home"), "KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap_servers,
           "ORDER_EVENTS_TOPIC": TOPIC}
    dg_checks(story, project, ["customer_totals", "order_events"], env)
    story.check("the topic's first range is planned and ingested (its own control plane: from the earliest)",
                run_planned_ranges(story, project, "kafka_components.definitions", "order_events", env)
                == ["kafka:earliest"])
    venv = story.shop / ".venv" / "bin"
    story.run(f"{venv}/dagster asset materialize -m kafka_components.definitions --select customer_totals",
              cwd=project, env=env)
    jobs = [json.loads(line) for line in story.run(f"{venv}/offset-assets jobs order_events --json", cwd=project,
                                                    env=env).splitlines()]
    story.check("job_log: one range, SUCCESS", [r["status"] for r in jobs] == ["SUCCESS"], jobs)
    offsets = story.run(f"{venv}/offset-assets offsets", cwd=project, env=env)
    story.check("customer_totals committed its offset on order_events",
                {tuple(line.split()[:2]) for line in offsets.splitlines()[1:]}
                == {("customer_totals", "order_events")}, offsets)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the folder (wheel, virtualenv, state) afterwards")
    args = parser.parse_args()
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="offset-assets-wheel-check-"))
    if work.resolve().is_relative_to(ROOT):
        raise SystemExit(f"the temporary folder {work} is inside the repository: set TMPDIR elsewhere")
    story = Story(work)
    print(f"wheel check in {work} (outside the repository)", flush=True)
    try:
        build_started = time.monotonic()
        wheel = build_wheel(work)
        print(f"  ok  built {wheel.name} ({wheel.stat().st_size / 1e6:.1f} MB) "
              f"in {time.monotonic() - build_started:.0f} s", flush=True)
        base = set_up(story, wheel)
        first_pipeline(story)
        shop_components(story)
        kafka = install_kafka_extra(story, wheel)
        with kafka_broker(story) as broker:
            kafka_events(story, broker)
            kafka_components(story, broker)
    except (StoryFailed, subprocess.TimeoutExpired) as exc:
        print(f"\nFAILED: {exc}\nthe story's folder is kept: {work}", file=sys.stderr, flush=True)
        return 1
    print(f"\nwheel check passed in {time.monotonic() - started:.0f} s: base install {base['seconds']:.0f} s, "
          f"virtualenv {base['bytes'] / 2**20:.0f} MiB; [kafka] added in {kafka['seconds']:.0f} s, "
          f"virtualenv {kafka['bytes'] / 2**20:.0f} MiB")
    if args.keep:
        print(f"kept: {work}")
    else:
        shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())

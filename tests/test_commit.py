"""A committed output is replaced without ever being absent, a kill at any step of a commit leaves one committed copy
after the next run's start-up, and of two runs racing for an output folder's lock exactly one takes it.

The processes that read, commit and race are tests/commit_support.py run as scripts: a commit is killed (SIGKILL,
its own) at one step by wrapping the file system function of that step in its process, never by a hook in the
product. The local file system commits by an atomic swap (``renameat2``); another Hadoop file system (here Hadoop's
ViewFileSystem mounting a local folder, as in tests/test_remote_outputs.py) by two renames through a claimed
sibling, which the next run's start-up moves back when the kill came between them.
"""
from __future__ import annotations

import ctypes
import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import commit_support
import pytest
from commit_support import commit_generation, folder_state
from test_remote_outputs import mount

from lia_spark.engine.orchestration.registry import remove_leftovers
from lia_spark.engine.runtime.lock import LOCK_FILE, LockHolder, RunLockError, run_lock
from lia_spark.engine.spark import filesystem
from lia_spark.engine.spark.filesystem import exchange_local
from lia_spark.run.config import config_from_dict

SUPPORT = Path(commit_support.__file__)
COMMITS = 40  # re-runs while the reader polls (a delete-then-rename commit: ~45% of its polls absent)
RACES = 50


def _start(*arguments: str, **options) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(SUPPORT), *arguments], text=True, start_new_session=True,
                            **options)


def _end_group(process: subprocess.Popen) -> None:
    """Kill what is left of the process group of ``process`` (its Spark JVM), which this test started."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _visible(folder: Path) -> list[str]:
    return sorted(name for name in os.listdir(folder) if not name.startswith("."))


def test_a_reader_polling_a_replaced_output_never_finds_it_absent_or_mixed(spark, tmp_path):
    final = tmp_path / "out" / "audit"
    commit_generation(spark, str(final), 0)
    stop = tmp_path / "stop"
    reader = _start("read", str(final), str(stop), stdout=subprocess.PIPE)
    try:
        assert reader.stdout.readline().strip() == "polling"
        for generation in range(1, COMMITS + 1):
            commit_generation(spark, str(final), generation)
        stop.touch()
        counts = json.loads(reader.stdout.readline())
    finally:
        stop.touch()
        reader.wait(timeout=60)
    print(f"reader during {COMMITS} commits: {counts}")
    assert counts["versions"] >= 10, f"the reader did not read across the commits: {counts}"
    assert counts["absent"] == counts["marker_absent"] == counts["mixed"] == 0, counts
    assert folder_state(final) == ("ok", COMMITS) and _visible(final.parent) == ["audit"]


# step -> (where the commit runs, the generation at the final path when the kill came, the one left after start-up)
KILLS = {
    "before-exchange": ("local", 1, 1),
    "after-exchange": ("local", 2, 2),
    "during-deletion": ("local", 2, 2),
    "before-aside": ("viewfs", 1, 1),
    "after-aside": ("viewfs", None, 1),
    "after-rename": ("viewfs", 2, 2),
    "during-deletion-of-aside": ("viewfs", 2, 2),
}


@pytest.mark.parametrize("step", KILLS)
def test_a_commit_killed_at_any_step_leaves_one_committed_copy_after_the_next_start(spark, tmp_path, step):
    where, killed_at, kept = KILLS[step]
    local_out = tmp_path / "mounted" / "out"
    out = f"{mount(spark, tmp_path / 'mounted')}/out" if where == "viewfs" else str(local_out)
    mounts = ([f"{out.split('/')[2]}={(tmp_path / 'mounted').as_uri()}"] if where == "viewfs" else [])
    commit_generation(spark, f"{out}/audit", 1)
    process = _start("commit", f"{out}/audit", "2", step.replace("-of-aside", ""), *mounts,
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        stdout, stderr = process.communicate(timeout=300)
    finally:
        _end_group(process)
    assert process.returncode == -signal.SIGKILL, (stdout, stderr[-2000:])
    assert folder_state(local_out / "audit")[1] == killed_at, "the kill came at the step named"
    assert len(_visible(local_out)) > 1, "the kill left its staging (or moved-aside) folder and claims"

    with run_lock(spark, out, command="lia-spark test", max_age_hours=1.0):  # the next run's start-up
        remove_leftovers(spark, config_from_dict({"run": {"output_dir": out}}))

    assert _visible(local_out) == ["audit"], "no staging folder, moved-aside folder, claim or lock is left"
    assert folder_state(local_out / "audit") == ("ok", kept)


def test_where_the_swap_is_refused_the_commit_goes_through_a_claimed_sibling(spark, tmp_path, monkeypatch):
    """EINVAL from renameat2 (a FUSE mount without RENAME_EXCHANGE): the two renames, on a local folder."""
    def refused(*arguments):
        ctypes.set_errno(errno.EINVAL)
        return -1

    final = tmp_path / "out" / "audit"
    commit_generation(spark, str(final), 1)
    monkeypatch.setattr(filesystem, "_renameat2", lambda: refused)
    assert not exchange_local(str(final), str(tmp_path))
    renames = []
    real_rename = filesystem.HadoopFiles.rename
    monkeypatch.setattr(filesystem.HadoopFiles, "rename",
                        lambda self, source, target: renames.append(target) or real_rename(self, source, target))
    commit_generation(spark, str(final), 2)
    assert [Path(target).name[:len("audit._old-")] for target in renames] == ["audit._old-", "audit"]
    assert folder_state(final) == ("ok", 2) and _visible(final.parent) == ["audit"]


def test_the_swap_exchanges_two_folders_and_names_a_missing_one(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    for folder in (first, second):
        folder.mkdir()
        (folder / f"{folder.name}.txt").write_text(folder.name, encoding="utf-8")
    assert exchange_local(str(first), str(second))
    assert os.listdir(first) == ["second.txt"] and os.listdir(second) == ["first.txt"]
    with pytest.raises(FileNotFoundError, match="missing"):
        exchange_local(str(first), str(tmp_path / "missing"))


def test_two_runs_racing_for_a_fresh_folders_lock_never_both_take_it(tmp_path):
    """Two processes, each with its Spark session, are released together (one line on each one's stdin) to take
    the lock of the same fresh folder, RACES times; the winner holds it until both have answered."""
    contenders = [_start("lock", stdin=subprocess.PIPE, stdout=subprocess.PIPE) for _ in range(2)]
    winners, lost = [], []
    try:
        assert [process.stdout.readline().strip() for process in contenders] == ["ready", "ready"]
        for race in range(RACES):
            for process in contenders:
                process.stdin.write(f"take {tmp_path / f'race-{race}' / 'out'}\n")
            for process in contenders:
                process.stdin.flush()
            answers = [process.stdout.readline().strip() for process in contenders]
            winners.append(answers.count("won"))
            lost += [answer for answer in answers if answer != "won"]
            for process in contenders:
                process.stdin.write("release\n")
                process.stdin.flush()
            assert [process.stdout.readline().strip() for process in contenders] == ["released", "released"]
    finally:
        for process in contenders:
            process.stdin.close()
            process.wait(timeout=60)
            _end_group(process)
    print(f"{RACES} races: {winners.count(1)} with one winner, {winners.count(2)} with two, {winners.count(0)} "
          "with none")
    assert winners == [1] * RACES
    assert all(line.startswith("lost run.output_dir: another run holds") and "lia-spark race" in line
               for line in lost), lost[:3]


def test_a_lock_dated_in_the_future_is_suspicious_and_names_the_command_that_removes_it(spark, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    lock = out / LOCK_FILE
    ahead = LockHolder("another-host", 4242, "lia-spark run", time.time() + 10 * 365.25 * 86400)
    lock.write_text(ahead.to_json(), encoding="utf-8")
    with pytest.raises(RunLockError, match=r"^run.output_dir: suspicious lock .* in the future") as refused:
        with run_lock(spark, str(out), command="lia-spark test", max_age_hours=24.0):
            pass
    assert f"remove it with `rm {lock}`" in str(refused.value) and "wait for it" not in str(refused.value)
    assert lock.read_text(encoding="utf-8") == ahead.to_json(), "the lock is kept"
    skewed = LockHolder("another-host", 4242, "lia-spark run", time.time() + 60)  # a clock a minute ahead
    lock.write_text(skewed.to_json(), encoding="utf-8")
    with pytest.raises(RunLockError, match="another run holds .* wait for it to finish"):
        with run_lock(spark, str(out), command="lia-spark test", max_age_hours=24.0):
            pass


def test_a_lock_removed_by_hand_beside_its_checksum_file_is_taken_again(spark, tmp_path):
    """`rm _LIA_LOCK`, as the stale lock's message says, leaves Hadoop's ``._LIA_LOCK.crc``; the next lock,
    written by the exclusive create, must not be read against it."""
    out = tmp_path / "out"
    out.mkdir()
    (out / f".{LOCK_FILE}.crc").write_bytes(b"crc\x00\x00\x02\x00\x12\x34\x56\x78")
    with run_lock(spark, str(out), command="lia-spark test", max_age_hours=1.0) as holder:
        assert holder.host == socket.gethostname() and (out / LOCK_FILE).exists()
    assert not (out / LOCK_FILE).exists()

"""The audit key (docs/math.md §5.9): the injected design's coins, counterfactuals, the shadows' and extra runs' coins
and the target's mechanism randomness come from 256 random bits kept in one owner-only file, never from run.seed.

The end-to-end test runs the injected design's pipeline (tracked in a real MLflow sqlite store, with Spark's event
log on) and `lia-spark inject` as the command line does, then tries every integer, hex string and config value found
in the store (params, tags, metrics, every artifact file, the database file itself), the export, the results, the
report, the event logs and the commands' output as the seed or key of the product's own draws: the best of them
recovers the coins at chance, the key from the output folder recovers all of them."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from key_support import key_file, stored_key
from pipeline_support import PYTHON, REPO, conf_file, tiny_values
from scipy import stats

from lia_spark.engine.models.audit_key import AuditKeyError, kept, new_local_key_file, stage_key
from lia_spark.engine.models.audit_key import stored_key as read_key
from lia_spark.engine.models.preparation import TRAINING_LABELS_PURPOSE
from lia_spark.engine.spark.filesystem import files_for
from lia_spark.kernels import hashing, injected, label_mechanisms, mechanisms
from lia_spark.kernels.hashing import AuditKey
from lia_spark.run.checks import ConfigError
from lia_spark.run.config import config_from_dict, load_config

KEY_HEX = re.compile(rb"[0-9a-fA-F]{64,}")
NUMBER = re.compile(rb"-?[0-9]+")
HEX = re.compile(rb"(?<![0-9a-fA-F])[0-9a-fA-F]{6,}(?![0-9a-fA-F])")
FAMILY_LEVEL = 0.001  # the chance band holds at 99.9% over every candidate together (Bonferroni)
RECOVERY_BATCH = 2048  # candidates whose draws are computed in one matrix (2048 x ~1,000 canaries: 16 MB of words)
VERIFIED_EVERY = 2000  # every 2000th candidate's batched draws are compared with the product's own


def test_a_key_shows_only_its_identifier_and_keys_streams_no_other_key_or_seed_predicts():
    key, other = AuditKey.drawn(), AuditKey.drawn()
    assert key != other and key.secret.hex() not in repr(key) and repr(key) == f"AuditKey(identifier={key.identifier})"
    assert len(key.identifier) == 16 and key.identifier not in key.secret.hex()
    ids = np.arange(200_000, dtype=np.int64)
    coins = hashing.hash_bits(key, injected.COIN_PURPOSE, ids) >> np.uint64(63)
    for unrelated in (hashing.hash_bits(other, injected.COIN_PURPOSE, ids),  # another key
                      hashing.hash_bits(key, injected.COUNTERFACTUAL_PURPOSE, ids),  # another purpose of the key
                      hashing.hash_bits(int.from_bytes(key.secret[:8], "little"), injected.COIN_PURPOSE, ids)):
        agreement = np.mean(coins == unrelated >> np.uint64(63))
        assert abs(agreement - 0.5) < 5 * 0.5 / np.sqrt(ids.size)  # 5 standard errors
    assert abs(coins.mean() - 0.5) < 5 * 0.5 / np.sqrt(ids.size)
    assert hashing.stream_key(key, "a") == hashing.stream_key(AuditKey(key.secret), "a") != hashing.stream_key(key, "b")
    with pytest.raises(TypeError, match="never becomes a Spark SQL literal"):
        hashing.signed_stream_key(key, injected.COIN_PURPOSE)
    with pytest.raises(ValueError, match="32 bytes"):
        AuditKey(b"short")


def test_a_key_file_round_trips_and_damage_is_described_without_its_content():
    key = AuditKey.drawn()
    assert hashing.parsed_key(hashing.key_text(key)) == key and hashing.key_text(key).endswith("\n")
    text = hashing.key_text(key)
    for damaged, said in ((text[:40], "holds 40 hex digits"), (text.replace(text[3], "z", 1), "not all hex digits"),
                          ("", "holds 0 hex digits")):
        with pytest.raises(ValueError, match=said) as refused:
            hashing.parsed_key(damaged)
        assert text[:16] not in str(refused.value)


def test_a_key_path_that_looks_like_a_key_is_refused_without_repeating_it():
    secret = AuditKey.drawn().secret.hex()
    with pytest.raises(ConfigError, match=r"^audit.key_path: names the file that holds the audit key") as refused:
        load_config(None, [f"audit.key_path={secret}"])
    assert secret not in str(refused.value)
    assert load_config(None, ["audit.key_path=/keys/audit.key"]).audit.key_path == "/keys/audit.key"


def _key_config(path: Path):
    return load_config(None, [f"run.output_dir={path / 'out'}"])


def test_the_key_file_is_owner_only_written_once_and_read_back(spark, tmp_path):
    config = _key_config(tmp_path)
    drawn = stage_key(spark, config)
    assert read_key(spark, config) is None and stage_key(spark, config) == drawn  # drawn once, kept in memory
    kept(spark, config, drawn)
    path = tmp_path / "out" / "audit_key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.read_text() == hashing.key_text(drawn)
    assert read_key(spark, config) == drawn == stage_key(spark, config)
    kept(spark, config, drawn)  # written already: nothing changes
    with pytest.raises(AuditKeyError, match="no longer holds the key this run started with"):
        kept(spark, config, AuditKey.drawn())
    assert [entry.name for entry in os.scandir(tmp_path / "out")] == ["audit_key"]  # no temporary file left
    path.unlink()  # deleting the file draws a new key
    assert stage_key(spark, config) != drawn
    given = load_config(None, [f"run.output_dir={tmp_path / 'other'}", f"audit.key_path={path}"])
    key_file(path)
    assert stage_key(spark, given) == stored_key(given) and not (tmp_path / "other").exists()


def test_without_hard_links_the_key_file_is_still_created_exclusively_and_owner_only(tmp_path, monkeypatch):
    """Some mounted file systems have no hard links: the key file itself is then created with O_EXCL."""
    def no_links(source, target):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    key, path = AuditKey.drawn(), tmp_path / "audit_key"
    assert new_local_key_file(str(path), key) and not new_local_key_file(str(path), AuditKey.drawn())
    assert hashing.parsed_key(path.read_text()) == key and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [entry.name for entry in tmp_path.iterdir()] == ["audit_key"]


def test_hadoop_writes_the_key_owner_only_and_never_over_another(spark, tmp_path):
    files = files_for(spark, f"file://{tmp_path}/key")
    assert files.create_private(f"file://{tmp_path}/key", "first\n")
    assert not files.create_private(f"file://{tmp_path}/key", "second\n")
    assert (tmp_path / "key").read_text() == "first\n" and files.permission(f"file://{tmp_path}/key") == ("file", 0o600)
    assert sorted(path.name for path in tmp_path.iterdir()) == [".key.crc", "key"]


@pytest.mark.parametrize("damage, said", [
    ("group", r"may be read or written by others than its owner \(mode 0640\).*`chmod 600 "),
    ("content", r"is damaged: it holds 63 hex digits, not the 64 hex digits of a 256-bit key"),
    ("binary", r"is damaged: it holds bytes that are not text"),
    ("folder", r"is not a file"),
])
def test_an_open_or_damaged_key_is_refused_naming_the_field_and_the_file(spark, tmp_path, damage, said):
    path = Path(key_file(tmp_path / "key"))
    secret = path.read_text().strip()
    if damage == "group":
        path.chmod(0o640)
    elif damage == "content":
        path.write_text(secret[:63] + "\n")
    elif damage == "binary":
        path.write_bytes(b"\xff" * 65)
    else:
        path.unlink()
        path.mkdir()
    config = load_config(None, [f"run.output_dir={tmp_path / 'out'}", f"audit.key_path={path}"])
    with pytest.raises(AuditKeyError, match=rf"^audit.key_path: the audit key file {re.escape(str(path))} {said}"):
        stage_key(spark, config)
    with pytest.raises(AuditKeyError):
        read_key(spark, config)
    assert isinstance(AuditKeyError("x"), ValueError)  # exit 2


# --- the end-to-end check -------------------------------------------------------------------------------------------

def _values(root: Path, name: str) -> dict:
    """A tiny run of the injected design in ``root/name`` (its key in the output folder, the default), tracked in the
    store of ``root``, Spark's event log in ``root/<name>-events``; the inject run reads the pipeline's data."""
    values = tiny_values(root / name, f"sqlite:///{root / 'mlflow.db'}")
    values["audit"] = {"repetitions": 3, "shadows": 2, "runs": 2, "export_tsv": True}
    values["models"] = {**values["models"], "training_mechanism": "rr", "epsilon": 2.0}
    values["spark"] = {**values["spark"], "extra": {"spark.eventLog.enabled": "true",
                                                     "spark.eventLog.dir": (root / f"{name}-events").as_uri()}}
    if name == "inject":
        values["data"] = {"parquet_path": str(root / "pipeline" / "data")}
    return values


def _command(root: Path, name: str, command: str, *overrides: str) -> str:
    """``lia-spark <command>`` on the config of ``name`` in a process of its own; its stdout and stderr."""
    (root / f"{name}-events").mkdir(exist_ok=True)
    conf = conf_file(root / f"{name}.yaml", _values(root, name))
    done = subprocess.run([PYTHON, "-m", "lia_spark.cli.main", command, "--conf", str(conf), *overrides], cwd=REPO,
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    """The pipeline (tracked) and `lia-spark inject`, each in its own output folder, and what they printed."""
    root = tmp_path_factory.mktemp("audit-key")
    printed = _command(root, "pipeline", "run") + _command(root, "inject", "inject")
    return root, printed


def _mlflow_material(root: Path) -> list[bytes]:
    """Every param, tag and metric (with its history) of every run in the store, every artifact file below the store's
    artifact root, and the database file itself."""
    import mlflow

    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = mlflow.MlflowClient(uri)
    found: list[bytes] = [(root / "mlflow.db").read_bytes()]
    experiments = client.search_experiments(view_type=mlflow.entities.ViewType.ALL)
    runs = client.search_runs([e.experiment_id for e in experiments], run_view_type=mlflow.entities.ViewType.ALL,
                              max_results=10_000)
    assert len(runs) > 5  # the parent run, its stages and settings
    for run in runs:
        values = [*run.data.params.items(), *run.data.tags.items(), *run.data.metrics.items()]
        values += [(name, point.value) for name in run.data.metrics
                   for point in client.get_metric_history(run.info.run_id, name)]
        found.append(json.dumps(values, default=str).encode())
    artifacts = [path for path in (root / "mlruns").rglob("*") if path.is_file()]
    assert any(path.name == "config.yaml" for path in artifacts) and any(path.name == "MLmodel" for path in artifacts)
    return found + [path.read_bytes() for path in artifacts]


def _shared_material(root: Path, printed: str) -> list[bytes]:
    """What leaves the output folders besides MLflow: the export (Parquet, Criteo file, manifest), the results JSON
    files, the report, every completion marker, Spark's event logs and the commands' output."""
    out, inject = root / "pipeline", root / "inject" / "inject"
    files = [*(inject / "export").rglob("*.parquet"), *(inject / "criteo").glob("day_*"), inject / "manifest.json",
             *(root / "pipeline" / "results").glob("*.json"), *(root / "inject" / "results").glob("*.json"),
             out / "report" / "report.html", *root.rglob("_LIA_COMPLETE"),
             *(path for events in root.glob("*-events") for path in events.rglob("*") if path.is_file())]
    export = pd.read_parquet(inject / "export")
    table = [json.dumps(export.astype(object).where(export.notna(), None).values.tolist()).encode()]
    return [path.read_bytes() for path in files] + table + [printed.encode()]


def _config_values(root: Path) -> list:
    """Every value of the logged config (the parent run's config.yaml artifacts)."""
    import yaml

    values: list = []

    def walk(node) -> None:
        if isinstance(node, dict):
            for item in node.values():
                walk(item)
        elif isinstance(node, list):
            for item in node:
                walk(item)
        else:
            values.append(node)

    for path in (root / "mlruns").rglob("config.yaml"):
        walk(yaml.safe_load(path.read_text(encoding="utf-8")))
    assert values
    return values


def _candidates(material: list[bytes], config_values: list) -> tuple[set[int], set[bytes]]:
    """Every integer and hex string of ``material`` and every config value, as seeds (integers, mod 2^64) and as keys
    (the bytes of hex strings of at least 64 digits, every 32-byte window; strings of 32 bytes)."""
    seeds, keys = set(), set()
    for blob in material:
        seeds.update(int(match) % 2**64 for match in NUMBER.findall(blob))
        for match in HEX.findall(blob):
            seeds.add(int(match[-16:], 16))
        for match in KEY_HEX.findall(blob):
            raw = bytes.fromhex(match[:len(match) // 2 * 2].decode())
            keys.update(raw[start:start + 32] for start in range(len(raw) - 31))
    for value in config_values:
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, (int, float)) and float(value).is_integer():
            seeds.add(int(value) % 2**64)
        text = str(value)
        if hashing.looks_like_key(text):
            keys.add(bytes.fromhex(text.strip()))
        if len(text.encode()) == 32:
            keys.add(text.encode())
    return seeds, keys


def _chance_band(trials: int, candidates: int, rate: float = 0.5) -> tuple[float, float]:
    """The accuracy range a guess independent of the truth stays in with probability 1 - FAMILY_LEVEL, over
    ``candidates`` guesses at once (two-sided binomial quantiles at FAMILY_LEVEL / candidates)."""
    tail = FAMILY_LEVEL / candidates / 2
    return (stats.binom.ppf(tail, trials, rate) / trials, stats.binom.isf(tail, trials, rate) / trials)


def _stream_keys(candidates, purpose: str) -> np.ndarray:
    """:func:`hashing.stream_key` (candidate, purpose) of every candidate: the integers at once (mix64(mix64(seed)
    XOR the purpose's blake2b digest)), the audit keys one by one (checked against the product by _recovery)."""
    is_key = np.array([isinstance(candidate, AuditKey) for candidate in candidates], dtype=bool)
    seeds = np.array([0 if key else int(candidate) % 2**64 for candidate, key in zip(candidates, is_key)],
                     dtype=np.uint64)
    digest = np.uint64(int.from_bytes(hashlib.blake2b(purpose.encode("utf-8"), digest_size=8).digest(), "little"))
    streams = hashing.mix64(hashing.mix64(seeds) ^ digest)
    for index in np.flatnonzero(is_key):
        streams[index] = hashing.stream_key(candidates[index], purpose)
    return streams


@dataclasses.dataclass(frozen=True)
class Game:
    """What an attacker holding a candidate seed or key would guess: ``draw(candidate)``, the product's own draw;
    ``streams(candidates)``, the 64-bit stream key (:func:`hashing.stream_key`) that draw depends on alone, of
    every candidate; and
    ``truth``, what the run drew, with ``chance``, the agreement of a guess independent of it."""

    truth: np.ndarray
    ids: np.ndarray
    draw: Callable[[object], np.ndarray]
    streams: Callable[[list], np.ndarray]
    chance: float
    uniform_below: float | None = None  # None: the draw is a stream's top bit; p: 1{u < p} of its uniforms

    def rows(self, streams: np.ndarray) -> np.ndarray:
        """The draws of many stream keys at once (row i: stream streams[i]): :func:`hashing.hash_bits`' words
        (draw 0: two SplitMix64 rounds of row_id XOR stream key), read as :func:`draw` reads them."""
        words = hashing.mix64(hashing.mix64(self.ids.astype(np.int64).view(np.uint64)[None, :] ^ streams[:, None]))
        if self.uniform_below is None:
            return (words >> np.uint64(63)).astype(np.int8)
        uniforms = ((words >> np.uint64(11)).astype(np.float64) + 0.5) / float(1 << 53)
        return (uniforms < self.uniform_below).astype(np.int8)


def _recovery(game: Game, candidates: list) -> tuple[float, float]:
    """(lowest, highest) agreement with the truth of the draws of every candidate, computed RECOVERY_BATCH candidates
    at a time from their stream keys; on every VERIFIED_EVERY-th candidate (the first, and the last) the batched
    draw equals the product's own ``draw``, so the batch computes what the product would."""
    streams = game.streams(candidates)
    checked = sorted({*range(0, len(candidates), VERIFIED_EVERY), len(candidates) - 1})
    for index in checked:
        assert np.array_equal(game.rows(streams[index:index + 1])[0], game.draw(candidates[index])), index
    agreements = np.concatenate([np.mean(game.rows(streams[start:start + RECOVERY_BATCH]) == game.truth, axis=1)
                                 for start in range(0, len(candidates), RECOVERY_BATCH)])
    return float(agreements.min()), float(agreements.max())


@pytest.mark.e2e
def test_nothing_in_mlflow_the_export_or_the_logs_recovers_the_coins(audited, capsys):
    root, printed = audited
    pipeline, inject = (config_from_dict(_values(root, name)) for name in ("pipeline", "inject"))
    keys = {name: stored_key(config) for name, config in (("pipeline", pipeline), ("inject", inject))}
    for config in (pipeline, inject):  # owner-only, in the output folder, one key per folder
        assert stat.S_IMODE(os.stat(Path(config.run.output_dir) / "audit_key").st_mode) == 0o600
    assert keys["pipeline"] != keys["inject"]
    material = _mlflow_material(root) + _shared_material(root, printed)
    for key in keys.values():  # neither the key's hex digits nor its bytes anywhere
        assert not any(key.secret.hex().encode() in blob.lower() or key.secret in blob for blob in material)
    seeds, raw_keys = _candidates(material, _config_values(root))
    assert pipeline.run.seed in seeds  # the seed is logged: the old scheme's coins would be recovered from it
    candidates = [*sorted(seeds), *(AuditKey(raw) for raw in sorted(raw_keys))]

    canaries = pd.read_parquet(root / "pipeline" / "models" / "canaries")
    sealed = pd.read_parquet(root / "inject" / "inject" / "sealed")
    games = {}
    for name, table in (("train stage's coins b", canaries), ("inject's coins b", sealed)):
        informative = table[table["label"] != table["counterfactual_label"]]
        ids, label, proxy = (informative[column].to_numpy() for column in ("row_id", "label", "proxy_prediction"))
        games[name] = Game(informative["hidden_bit"].to_numpy(), ids, lambda key, ids=ids, label=label, proxy=proxy:
                           injected.injected_draws(ids, label, proxy, key=key)[1],
                           lambda keys: _stream_keys(keys, injected.COIN_PURPOSE), 0.5)
    informative = canaries[canaries["label"] != canaries["counterfactual_label"]]
    ids = informative["row_id"].to_numpy()
    games["extra run's coins"] = Game(np.stack(informative["run_hidden_bits"].to_numpy())[:, 0], ids,
                                      lambda key: injected.run_coins(ids, key=key, run=1),
                                      lambda keys: _stream_keys(keys, f"{injected.RUN_PURPOSE}/1/coin"), 0.5)
    trained = injected.training_labels(informative["label"].to_numpy(), informative["counterfactual_label"].to_numpy(),
                                       informative["hidden_bit"].to_numpy())
    flipped = (informative["released_label"].to_numpy() != trained).astype(np.int8)
    flip_rate = mechanisms.flip_probability(2.0)

    def mechanism_seed(key) -> int:  # the target's RR seed, derived from the key as the product derives it
        return int(hashing.stream_key(key, TRAINING_LABELS_PURPOSE)) >> 1

    games["target's RR flips"] = Game(
        flipped, ids, lambda key: (label_mechanisms.randomized_response(trained, ids, epsilon=2.0,
                                                                        seed=mechanism_seed(key)) != trained
                                   ).astype(np.int8),
        lambda keys: _stream_keys(_stream_keys(keys, TRAINING_LABELS_PURPOSE) >> np.uint64(1), mechanisms.RR_PURPOSE),
        flip_rate ** 2 + (1 - flip_rate) ** 2, uniform_below=flip_rate)
    lines = [f"audit key recovery: {len(candidates):,} candidates ({len(seeds):,} integers, {len(raw_keys):,} "
             f"32-byte strings) from the MLflow store, the export, results, report, markers, event logs and output"]
    for name, game in games.items():
        low, high = _chance_band(game.truth.size, len(candidates), game.chance)
        found = _recovery(game, candidates)
        real = _recovery(game, [keys["inject" if name.startswith("inject") else "pipeline"]])[1]
        lines.append(f"  {name}: {game.truth.size} canaries, best agreement from the store {found[1]:.4f} (lowest "
                     f"{found[0]:.4f}; chance {game.chance:.3f}, 99.9% band over the candidates [{low:.4f}, "
                     f"{high:.4f}]), with the key from the output folder {real:.4f}")
        assert game.truth.size > 500 and low <= found[0] and found[1] <= high, lines[-1]
        assert real == 1.0, lines[-1]
    with capsys.disabled():
        print("\n" + "\n".join(lines))


@pytest.mark.e2e
def test_a_forced_rerun_keeps_the_key_and_the_coins_and_a_deleted_key_redraws_them(audited):
    root, _ = audited
    key, canaries = root / "pipeline" / "audit_key", root / "pipeline" / "models" / "canaries"
    coins_now = lambda: pd.read_parquet(canaries).set_index("row_id").sort_index()["hidden_bit"]
    before, coins = key.read_bytes(), coins_now()
    train = ("run.stages=[train]", "tracking.enabled=false")
    printed = _command(root, "pipeline", "run", *train, "run.force=true")
    assert key.read_bytes() == before and "train: recomputing (run.force=true)" in printed
    pd.testing.assert_series_equal(coins_now(), coins)
    key.unlink()
    printed = _command(root, "pipeline", "run", *train)
    old, new = hashing.parsed_key(before.decode()).identifier, hashing.parsed_key(key.read_text()).identifier
    assert f'audit.key_identifier "{old}" -> "{new}"' in printed and old != new
    assert abs((coins_now() == coins).mean() - 0.5) < 0.05  # fresh coins: half agree
    assert before.decode().strip() not in printed and key.read_text().strip() not in printed

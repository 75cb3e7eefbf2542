"""The paper's baselines and ablations as objective kinds, sharing modes and masking units:
each loss computed by hand, gradients where they must (and must not) go, whole words and
spans, resuming bitwise, exporting to transformers."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers import SPECIAL, tiny_config
from safetensors.torch import load_file

from electra.commands.pretrain import PretrainOptions, pretrain
from electra.config import TrainConfig
from electra.errors import UserError
from electra.objectives.config import ObjectiveConfig
from electra.objectives.masking import Batch, Draws, Noise, choose_positions, unit_starts
from electra.objectives.pretraining import ElectraPretrainingModel
from electra.run_config import RunConfig, load_run_config
from electra.train.metrics import TIMING_KEYS, iter_metrics

# One row of 8: [CLS] 10 11 12 13 14 15 [SEP]; positions 2 and 5 are chosen (highest scores),
# the first becomes [MASK], the second keeps its token (mask_u 0.3 and 0.95).
X = torch.tensor([[SPECIAL.cls, 10, 11, 12, 13, 14, 15, SPECIAL.sep]])
M = torch.ones_like(X)
SCORES = torch.tensor([[0.0, 0.1, 0.9, 0.2, 0.3, 0.8, 0.4, 0.0]])


def noise(sample_u: float = 0.5) -> Noise:
    return Noise(scores=SCORES, mask_u=torch.tensor([[0.3, 0.95]]),
                 random_ids=torch.tensor([[40, 41]]),
                 sample_u=torch.full((1, 2, 1), sample_u))


# tiny_config's 64 positions: DeBERTa's buckets fewer than V3's 256
BODY = {"bert": {}, "deberta": {"body": "deberta", "position_buckets": 32}}


def build(kind: str, body: str = "bert", **obj) -> tuple[ElectraPretrainingModel,
                                                         ObjectiveConfig]:
    cfg = ObjectiveConfig(kind=kind, mask_prob=0.34, max_predictions=2, **obj)
    torch.manual_seed(0)
    model = ElectraPretrainingModel(tiny_config(generator_size=0.5, **BODY[body]), cfg, SPECIAL)
    with torch.no_grad():  # heads and norms away from their init, so every term matters
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model.eval(), cfg


def run(kind: str, **obj):
    model, cfg = build(kind, **obj)
    return model, cfg, model(Batch(X, M), Draws(noise()))


def inverse_cdf(logits: torch.Tensor, u: float) -> torch.Tensor:
    cdf = torch.softmax(logits.double(), -1).cumsum(-1)
    return torch.searchsorted(cdf, torch.full((*cdf.shape[:-1], 1), u, dtype=torch.float64)
                              ).squeeze(-1).clamp(max=cdf.shape[-1] - 1)


def bce(logit: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
    return -(label * F.logsigmoid(logit) + (~label) * F.logsigmoid(-logit))


X_MASKED = X.clone()
X_MASKED[0, 2] = SPECIAL.mask  # position 5 keeps 14
TARGETS = torch.tensor([11, 14])
POS = torch.tensor([2, 5])


def generator_part(model: ElectraPretrainingModel):
    logits = model.generator(X_MASKED, M, None, POS[None])[0]  # (2, V)
    gen = F.cross_entropy(logits, TARGETS)
    corrupted = X.clone()
    corrupted[0, POS] = inverse_cdf(logits, 0.5)
    return gen, corrupted


def test_hand_computed_electra_and_electra15():
    model, _, out = run("electra")
    gen, corrupted = generator_part(model)
    labels = corrupted != X
    d = model.discriminator(corrupted, M)
    torch.testing.assert_close(out.gen_loss, gen)
    torch.testing.assert_close(out.disc_loss, bce(d, labels).mean())
    torch.testing.assert_close(out.loss, gen + 50 * bce(d, labels).mean())
    assert torch.equal(out.labels, labels)
    model, _, out = run("electra15")
    torch.testing.assert_close(out.disc_loss, bce(d, labels)[0, POS].mean())  # M only


def test_hand_computed_mlm():
    model, cfg, out = run("mlm")  # BERT's 80/10/10: 0.3 -> [MASK], 0.95 -> kept
    assert (cfg.mask_token_prob, cfg.random_token_prob) == (0.8, 0.1)
    logits = model.main_mlm(X_MASKED, M, None, POS[None])[0]
    torch.testing.assert_close(out.losses["mlm_loss"], F.cross_entropy(logits, TARGETS))
    torch.testing.assert_close(out.loss, out.losses["mlm_loss"])
    assert set(out.losses) == {"mlm_loss"} and "disc_acc" not in out.counts
    acc = (logits.argmax(-1) == TARGETS).float().mean()
    torch.testing.assert_close(out.stats["mlm_acc"], acc)


@pytest.mark.parametrize("replacement", ["uniform", "unigram"])
def test_hand_computed_random_replacements(replacement):
    model, _ = build("random", replacement=replacement)
    counts = torch.zeros(tiny_config().vocab_size)
    counts[[20, 30, 60]] = torch.tensor([1.0, 1.0, 2.0])  # cumulative 1, 2, 4 of 4
    model.set_unigram(counts)
    out = model(Batch(X, M), Draws(noise(sample_u=0.6)))
    corrupted = X.clone()
    corrupted[0, POS] = torch.tensor([40, 41]) if replacement == "uniform" else 60  # u=0.6
    assert torch.equal(out.corrupted_ids, corrupted)
    d = model.discriminator(corrupted, M)
    torch.testing.assert_close(out.loss, 50 * bce(d, corrupted != X).mean())
    assert set(out.losses) == {"disc_loss"} and "gen_acc" not in out.counts


def test_hand_computed_replace_mlm():
    model, _, out = run("replace_mlm")
    gen, corrupted = generator_part(model)
    logits = model.main_mlm(corrupted, M, None, POS[None])[0]  # sees samples, not [MASK]
    mlm = F.cross_entropy(logits, TARGETS)
    torch.testing.assert_close(out.losses["mlm_loss"], mlm)
    torch.testing.assert_close(out.loss, gen + mlm)
    assert not (out.corrupted_ids == SPECIAL.mask).any()


def test_hand_computed_all_tokens_mlm():
    model, _, out = run("all_tokens_mlm")
    gen, corrupted = generator_part(model)
    h = model.discriminator.encoder(corrupted, M)
    z = model.main_mlm.logits(h)[0].double()  # (8, V): every position
    D = torch.sigmoid(-model.discriminator.head(h)[0].double())  # copy probabilities
    p = [D[i] * float(X[0, i] == corrupted[0, i]) + (1 - D[i]) * torch.softmax(z[i], -1)[X[0, i]]
         for i in range(8)]
    expected = -torch.stack(p).log().mean()
    torch.testing.assert_close(out.losses["mlm_loss"].double(), expected)
    torch.testing.assert_close(out.loss, gen + out.losses["mlm_loss"])


@pytest.mark.parametrize("body", ["bert", "deberta"])  # DeBERTaV3's own pairing
def test_gdes_gradients_and_the_exported_table(body):
    """The generator's MLM loss reaches E and not E_delta; the discriminator's loss reaches
    E_delta and not E; the discriminator kept (and exported) reads E + E_delta."""
    fresh = ElectraPretrainingModel(tiny_config(**BODY[body]), ObjectiveConfig(sharing="gdes"),
                                    SPECIAL)
    assert torch.count_nonzero(fresh.discriminator.encoder.embeddings.word_delta) == 0
    model, _ = build("electra", body=body, sharing="gdes")
    emb = model.discriminator.encoder.embeddings
    E, delta = model.generator.encoder.embeddings.word_embeddings.weight, emb.word_delta
    assert emb.word_embeddings is model.generator.encoder.embeddings.word_embeddings
    out = model(Batch(X, M), Draws(noise()))
    out.gen_loss.backward(retain_graph=True)
    assert E.grad is not None and E.grad.abs().sum() > 0
    assert delta.grad is None or delta.grad.abs().sum() == 0
    E.grad = None
    out.disc_loss.backward()
    assert E.grad is None or E.grad.abs().sum() == 0
    assert delta.grad.abs().sum() > 0
    with torch.no_grad():
        delta.add_(torch.randn_like(delta))
    plain = model.parts()["discriminator"]
    assert "word_delta" not in str(list(plain.state_dict()))
    torch.testing.assert_close(plain.encoder.embeddings.word_embeddings.weight, E + delta)
    torch.testing.assert_close(plain(X, M), model.discriminator(X, M))


def test_all_sharing_ties_every_generator_weight():
    with pytest.raises(UserError, match="generator must be the same size"):
        load_run_config("tiny", sets=["objective.sharing=all"])
    cfg = ObjectiveConfig(sharing="all")
    model = ElectraPretrainingModel(tiny_config(generator_size=1.0), cfg, SPECIAL)
    gen, disc = model.generator, model.discriminator
    assert gen.encoder is disc.encoder
    disc_ids = {id(p) for p in disc.encoder.parameters()}
    assert all(id(p) in disc_ids for p in gen.encoder.parameters())
    own = {n for n, p in gen.named_parameters() if id(p) not in disc_ids}
    assert own == {"head_dense.weight", "head_dense.bias", "head_norm.weight",
                   "head_norm.bias", "output_bias"}


def words_batch(seed: int, rows: int = 16, T: int = 64):
    """Rows of candidates with random word boundaries (words of 1-4 tokens)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 100, (rows, T), generator=g)
    ids[:, 0], ids[:, -1] = SPECIAL.cls, SPECIAL.sep
    starts = torch.zeros(rows, T, dtype=torch.bool)
    for r in range(rows):
        i = 1
        while i < T - 1:
            starts[r, i] = True
            i += int(torch.randint(1, 5, (1,), generator=g))
    return ids, torch.ones_like(ids), starts


def test_whole_word_masking_never_splits_a_word_and_keeps_the_budget():
    cfg = ObjectiveConfig(unit="word", max_predictions=20)
    used = []
    for seed in range(20):
        ids, _, starts = words_batch(seed)
        cand = (ids != SPECIAL.cls) & (ids != SPECIAL.sep)
        positions, weights = choose_positions(cand, cfg, torch.Generator().manual_seed(seed),
                                              word_starts=starts)
        budget = round(0.15 * 62)  # 62 candidates a row: 9 tokens
        word = starts.long().cumsum(1)  # word index of each token
        for r in range(len(ids)):
            chosen = set(positions[r][weights[r]].tolist())
            assert len(chosen) == int(weights[r].sum()) <= budget  # distinct, within budget
            for w in {int(word[r, p]) for p in chosen}:  # every piece of a chosen word
                assert {i for i in range(64) if cand[r, i] and word[r, i] == w} <= chosen
            used.append(len(chosen) / budget)
    assert sum(used) / len(used) > 0.8  # it stops short by less than one word, on average


@pytest.mark.slow
def test_span_lengths_are_geometric_with_the_mean_asked():
    """Spans of whole single-token words: their lengths (in words) follow a geometric law
    with mean span_mean (chi-square over lengths 1-7); chosen spans are never split."""
    cfg = ObjectiveConfig(unit="span", span_mean=3.0, mask_prob=0.3, max_predictions=150)
    g = torch.Generator().manual_seed(0)
    rows, T = 64, 512
    ids = torch.randint(5, 100, (rows, T), generator=g)
    ids[:, 0], ids[:, -1] = SPECIAL.cls, SPECIAL.sep
    cand = (ids != SPECIAL.cls) & (ids != SPECIAL.sep)
    every = torch.ones(rows, T, dtype=torch.bool)  # every token is a word
    u = torch.rand(rows, T, generator=g)
    starts = unit_starts(cand, cfg, every, u)
    lengths = []
    for r in range(rows):
        at = [*torch.nonzero(starts[r]).squeeze(-1).tolist(), T - 1]
        lengths += [b - a for a, b in itertools.pairwise(at)][:-1]  # complete spans
    lengths = torch.tensor(lengths)
    q = 1 / 3
    assert lengths.float().mean().item() == pytest.approx(3.0, abs=0.1)
    n = len(lengths)
    expected = torch.tensor([n * q * (1 - q) ** (k - 1) for k in range(1, 8)])
    observed = torch.tensor([(lengths == k).sum().item() for k in range(1, 8)])
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    assert chi2 < 24.3, (observed, expected)  # the 0.001 quantile of chi-square with 7 dof
    positions, weights = choose_positions(cand, cfg, scores=torch.rand(rows, T, generator=g),
                                          word_starts=every, span_u=u)
    span = starts.long().cumsum(1)  # (rows, T) each token's span number in its row
    row = torch.arange(rows)[:, None].expand_as(positions)[weights]
    chosen = torch.zeros(rows, T, dtype=torch.bool)
    chosen[row, positions[weights]] = True
    hit = torch.zeros(rows, T + 1, dtype=torch.bool)  # the spans a chosen token lies in
    hit[row, span[row, positions[weights]]] = True
    assert not (cand & hit.gather(1, span) & ~chosen).any()  # each of their tokens chosen


# -- through the trainer: resume bitwise, export to transformers ---------------------------

VARIANTS = {
    "electra": {}, "mlm": {"kind": "mlm"}, "random": {"kind": "random"},
    "random-unigram": {"kind": "random", "replacement": "unigram"},
    "electra15": {"kind": "electra15"}, "replace_mlm": {"kind": "replace_mlm"},
    "all_tokens_mlm": {"kind": "all_tokens_mlm"}, "none": {"sharing": "none"},
    "gdes": {"sharing": "gdes"}, "word": {"unit": "word"}, "span": {"unit": "span"},
    "schedule": {"temperature": 3.0, "temperature_end": 1.0, "temperature_steps": 8},
}


def config(objective: dict, generator_size: float = 0.5, **train) -> RunConfig:
    from helpers import small_model

    t = dict(lr=1e-3, batch_size=8, warmup_steps=3, max_steps=10, log_every=1, eval_every=5,
             eval_batches=2, save_every=5, precision="fp32", seed=7)
    return RunConfig(model=small_model(hidden_dropout=0.1, attention_dropout=0.1,
                                       generator_size=generator_size),
                     objective=ObjectiveConfig(**objective),
                     train=TrainConfig(**{**t, **train}))


def go(data: Path, out: Path, cfg: RunConfig, **kw) -> None:
    pretrain(PretrainOptions(data=str(data), out=str(out), config=cfg, progress=False, **kw))


def same_runs(a: Path, b: Path) -> None:
    def rows(run):
        return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in iter_metrics(run)]

    assert rows(a) == rows(b)
    for kind in ("discriminator", "generator"):
        if (a / kind).is_dir():
            wa, wb = load_file(a / kind / "model.safetensors"), load_file(
                b / kind / "model.safetensors")
            assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.mark.parametrize("name", list(VARIANTS))
def test_every_variant_resumes_bitwise_and_exports(letters_data, tmp_path, name):
    cfg = config(VARIANTS[name])
    go(letters_data, tmp_path / "a", cfg)
    go(letters_data, tmp_path / "b", cfg, stop_after=3)
    go(letters_data, tmp_path / "b", cfg, resume=True)
    same_runs(tmp_path / "a", tmp_path / "b")
    rec = list(iter_metrics(tmp_path / "a"))[-1]
    kind = cfg.objective.kind
    assert ("disc_loss" in rec) == (kind in ("electra", "random", "electra15"))
    assert ("gen_loss" in rec) == (kind not in ("mlm", "random"))
    assert ("mlm_loss" in rec) == (kind in ("mlm", "replace_mlm", "all_tokens_mlm"))
    assert ("val_disc_auc" in rec) == (kind in ("electra", "random", "electra15",
                                                "all_tokens_mlm"))
    transformers = pytest.importorskip("transformers")
    from electra.cli import main

    assert main(["export", str(tmp_path / "a"), "--out", str(tmp_path / "hf")]) == 0
    disc, info = transformers.AutoModelForPreTraining.from_pretrained(
        tmp_path / "hf/discriminator", output_loading_info=True)
    assert not any(info.values()), info
    from electra.saved import folders

    ours = folders.load(tmp_path / "a", "discriminator")[0].eval()
    ids = torch.randint(5, ours.config.vocab_size, (2, 16))
    mask = torch.ones_like(ids)
    with torch.no_grad():
        torch.testing.assert_close(ours(ids, mask), disc.eval()(input_ids=ids,
                                   attention_mask=mask).logits, atol=1e-5, rtol=1e-5)
    if (tmp_path / "a/generator").is_dir():
        gen, info = transformers.AutoModelForMaskedLM.from_pretrained(
            tmp_path / "hf/generator", output_loading_info=True)
        assert not any(info.values()), info
        ours_gen = folders.load(tmp_path / "a", "generator")[0].eval()
        with torch.no_grad():
            torch.testing.assert_close(ours_gen(ids, mask), gen.eval()(
                input_ids=ids, attention_mask=mask).logits, atol=1e-5, rtol=1e-5)


def test_two_stage_training_across_the_boundary(letters_data, tmp_path):
    """Stage 1 trains the generator alone (no discriminator loss); the discriminator then
    starts from the generator's encoder and trains with the generator frozen; stopped at
    the boundary and resumed, the run ends bitwise where an uninterrupted one ends."""
    cfg = config({"two_stage_steps": 4, "sharing": "none"}, generator_size=1.0, max_steps=8)
    go(letters_data, tmp_path / "a", cfg)
    go(letters_data, tmp_path / "b", cfg, stop_after=4)
    go(letters_data, tmp_path / "b", cfg, resume=True)
    same_runs(tmp_path / "a", tmp_path / "b")
    rec = list(iter_metrics(tmp_path / "a"))
    assert all("disc_loss" not in r for r in rec[:4]) and all("disc_loss" in r for r in rec[4:])
    ck = load_file(tmp_path / "a/checkpoints/step-0000005/model.safetensors")
    final = load_file(tmp_path / "a/checkpoints/step-0000008/model.safetensors")
    gen = [k for k in ck if k.startswith("generator.")]
    assert gen and all(torch.equal(ck[k], final[k]) for k in gen)  # frozen in stage 2
    disc = [k for k in ck if k.startswith("discriminator.encoder.layers")]
    assert any(not torch.equal(ck[k], final[k]) for k in disc)  # the discriminator trains


def test_stage_2_starts_the_discriminator_from_the_generator():
    cfg = ObjectiveConfig(two_stage_steps=5, sharing="none")
    model = ElectraPretrainingModel(tiny_config(generator_size=1.0), cfg, SPECIAL)
    gen, disc = model.generator.encoder.state_dict(), model.discriminator.encoder.state_dict()
    assert any(not torch.equal(gen[k], disc[k]) for k in gen)
    model.start_stage_2()
    disc = model.discriminator.encoder.state_dict()
    assert all(torch.equal(gen[k], disc[k]) for k in gen)


def test_the_schedule_goes_from_3_to_1():
    cfg = ObjectiveConfig(temperature=3.0, temperature_end=1.0, temperature_steps=100)
    assert [cfg.temperature_at(s) for s in (0, 50, 100, 500)] == [3.0, 2.0, 1.0, 1.0]
    assert cfg.final_temperature == 1.0
    with pytest.raises(UserError, match="go together"):
        ObjectiveConfig(temperature_end=1.0)
    assert math.isclose(ObjectiveConfig().temperature_at(7), 1.0)

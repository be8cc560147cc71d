"""Proof of the hidden checks of ex08-comparing-models: each misconception fails the checks aimed at it (and
not those it does not break), three correct implementations (vectorised torch, Python loops over
`random.Random`, numpy) pass every check whatever the order of their draws, stubs and the release score 0,
and the points add up to course.yml's."""

from __future__ import annotations

import re

import pytest
from check_proofs import (
    assert_bundle_caught,
    assert_bundles_sound,
    assert_every_check_targeted,
    assert_hints_name,
    assert_passes_every_check,
    assert_points_add_up,
    assert_release_scores_zero,
    assert_scores_zero,
    assert_solution_passes_every_check,
    bundle_ids,
    bundle_misconceptions,
    graded_cells,
    reference_source,
    stubbed,
    wrong_entry,
)

CHECKS = "autograder/checks/ex08_comparing_models.py"
NOTEBOOK = "solutions/ex08-comparing-models/comparing_models.ipynb"
RELEASE = "exercises/ex08-comparing-models/comparing_models.ipynb"
PRELUDE = ("import math\nimport random\nfrom functools import partial\n\nimport torch\n\n"
           "from bertcourse.evaluation import tiny_classifier\n")


def solution() -> str:
    return reference_source(NOTEBOOK, PRELUDE)


def mutate(*pairs: tuple[str, str]) -> str:
    source = solution()
    for old, new in pairs:
        assert source.count(old) == 1, (old, source.count(old))
        source = source.replace(old, new)
    return source


LOOPS = PRELUDE + '''
def sentence_losses(logits, labels):
    losses = []
    for row_logits, row_labels in zip(logits.tolist(), labels.tolist()):
        total, count = 0.0, 0
        for scores, label in zip(row_logits, row_labels):
            if label == -100:
                continue
            top = max(scores)
            total += top + math.log(sum(math.exp(s - top) for s in scores)) - scores[label]
            count += 1
        losses.append(total / count if count else float("nan"))
    return losses


def quantiles(stats, alpha):
    stats = sorted(stats)
    return stats[int(alpha / 2 * len(stats))], stats[min(len(stats) - 1, int((1 - alpha / 2) * len(stats)))]


def paired_interval(losses_a, losses_b, *, n_resamples=2000, alpha=0.05, seed=0):
    rng = random.Random(seed)
    d = [float(x) - float(y) for x, y in zip(losses_a.tolist(), losses_b.tolist())]
    n = len(d)
    stats = [sum(d[rng.randrange(n)] for _ in range(n)) / n for _ in range(n_resamples)]
    return (sum(d) / n, *quantiles(stats, alpha))


def accuracy_interval(correct, *, n_resamples=2000, alpha=0.05, seed=0):
    rows = [[float(v) for v in row] for row in correct.tolist()]
    per_sentence = [sum(column) / len(rows) for column in zip(*rows)]
    rng = random.Random(seed)
    n = len(per_sentence)
    stats = [sum(per_sentence[rng.randrange(n)] for _ in range(n)) / n for _ in range(n_resamples)]
    return (sum(per_sentence) / n, *quantiles(stats, alpha))


def paired_seed_test(correct_a, correct_b, *, n_resamples=2000, seed=0):
    a = [[float(v) for v in row] for row in correct_a.tolist()]
    b = [[float(v) for v in row] for row in correct_b.tolist()]
    mean = lambda rows: sum(map(sum, rows)) / (len(rows) * len(rows[0]))
    observed = mean(a) - mean(b)
    rng = random.Random(seed)
    n = len(a[0])
    extreme = 0
    for _ in range(n_resamples):
        sentences = [rng.randrange(n) for _ in range(n)]
        scores = []
        for rows in (a, b):
            seeds = [rows[rng.randrange(len(rows))] for _ in rows]
            scores.append(sum(row[j] for row in seeds for j in sentences) / (len(seeds) * n))
        extreme += abs(scores[0] - scores[1] - observed) >= abs(observed) - 1e-12
    return observed, (1 + extreme) / (1 + n_resamples)


def verdict(difference, p, alpha=0.05):
    if p >= alpha or difference == 0:
        return "no difference beyond the noise"
    return "A ahead beyond the noise" if difference > 0 else "B ahead beyond the noise"


def finetune_over_seeds(make_model, train_batches, eval_batch, seeds, *, epochs=1, lr=0.1):
    table = []
    loss_fn = torch.nn.CrossEntropyLoss()
    for seed in seeds:
        torch.manual_seed(seed)
        model = make_model()
        model.train()
        opt = torch.optim.SGD(model.parameters(), lr)
        gen = torch.Generator()
        gen.manual_seed(seed)
        for epoch in range(epochs):
            for index in torch.randperm(len(train_batches), generator=gen):
                x, y = train_batches[int(index)]
                model.zero_grad()
                loss_fn(model(x), y).backward()
                opt.step()
        model.train(False)
        with torch.inference_mode():
            predicted = model(eval_batch[0]).argmax(dim=1)
        table.append([p == t for p, t in zip(predicted.tolist(), eval_batch[1].tolist())])
    return table


answer_q1, answer_q2 = " D", "(b)"
wwm_measured, answer_wwm = [0.021, 0.004, 0.038], "(A)"  # numbers of another run: token-level's loss lower
seeds_measured, answer_seeds = (-0.031, 0.001), " d"  # GPT ahead
'''

NUMPY = PRELUDE + '''
import numpy as np


def sentence_losses(logits, labels):
    x = logits.double().numpy()
    y = labels.numpy()
    log_z = np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1)) + x.max(-1)
    picked = np.take_along_axis(x, np.clip(y, 0, None)[..., None], -1)[..., 0]
    nll = np.where(y != -100, log_z - picked, np.nan)
    with np.errstate(invalid="ignore"):
        return torch.tensor([np.nanmean(row) if np.isfinite(row).any() else np.nan for row in nll])


def paired_interval(losses_a, losses_b, *, n_resamples=2000, alpha=0.05, seed=0):
    d = np.asarray(losses_a, dtype=float) - np.asarray(losses_b, dtype=float)
    rng = np.random.default_rng(seed)
    stats = d[rng.integers(0, len(d), size=(n_resamples, len(d)))].mean(1)
    low, high = np.quantile(stats, [alpha / 2, 1 - alpha / 2], method="lower")
    return float(d.mean()), float(low), float(high)


def accuracy_interval(correct, *, n_resamples=2000, alpha=0.05, seed=0):
    per_sentence = np.asarray(correct, dtype=float).mean(0)
    rng = np.random.default_rng(seed)
    stats = per_sentence[rng.integers(0, len(per_sentence), size=(n_resamples, len(per_sentence)))].mean(1)
    low, high = np.quantile(stats, [alpha / 2, 1 - alpha / 2], method="higher")
    return float(per_sentence.mean()), float(low), float(high)


def paired_seed_test(correct_a, correct_b, *, n_resamples=2000, seed=0):
    a, b = np.asarray(correct_a, dtype=float), np.asarray(correct_b, dtype=float)
    rng = np.random.default_rng(seed)
    n = a.shape[1]
    sentences = rng.integers(0, n, size=(n_resamples, n))
    means = []
    for m in (b, a):  # B's seeds drawn first: any order of draws is fine
        seeds = rng.integers(0, m.shape[0], size=(n_resamples, m.shape[0]))
        per_seed_sentence = m[seeds[:, :, None], sentences[:, None, :]]
        means.append(per_seed_sentence.mean((1, 2)))
    observed = a.mean() - b.mean()
    extreme = np.sum(np.abs(means[1] - means[0] - observed) >= abs(observed) - 1e-12)
    return float(observed), float((1 + extreme) / (1 + n_resamples))


def verdict(difference, p, alpha=0.05):
    return {(True, True): "A ahead beyond the noise", (True, False): "B ahead beyond the noise"}.get(
        (p < alpha and difference != 0, difference > 0), "no difference beyond the noise")


def finetune_over_seeds(make_model, train_batches, eval_batch, seeds, *, epochs=1, lr=0.1):
    out = np.zeros((len(seeds), len(eval_batch[1])), dtype=np.int64)
    for k, seed in enumerate(seeds):
        torch.manual_seed(seed)
        net = make_model()
        sgd = torch.optim.SGD(params=list(net.parameters()), lr=lr)
        g = torch.Generator().manual_seed(seed)
        for _ in range(epochs):
            net.train()
            for i in torch.randperm(len(train_batches), generator=g):
                sgd.zero_grad(set_to_none=False)
                x, y = train_batches[i]
                torch.nn.functional.nll_loss(torch.log_softmax(net(x), -1), y).backward()
                sgd.step()
        net.eval()
        with torch.no_grad():
            out[k] = net(eval_batch[0]).numpy().argmax(1) == eval_batch[1].numpy()
    return torch.from_numpy(out)


answer_q1, answer_q2 = "d", "B"
wwm_measured, answer_wwm = (-0.012, -0.031, 0.006), "b"  # numbers of another run: no difference shown
seeds_measured, answer_seeds = (0.012, 0.05), "A"  # p = alpha: within the noise
'''

def another_recipe() -> str:
    """The solution with part 6 written otherwise, as the contract allows: the order shuffled by a
    `random.Random` of the seed's own, a look at the training batches in eval mode after each epoch (to monitor),
    the loss as a sum divided by the batch size, and the evaluation in chunks."""
    source = solution()
    start = source.index("def finetune_over_seeds(")
    end = source.index("### END SOLUTION\n", start) + len("### END SOLUTION\n")
    return source[:start] + '''def finetune_over_seeds(make_model, train_batches, eval_batch, seeds, *, epochs=1,
                        lr=0.1):
    table = []
    for seed in seeds:
        torch.manual_seed(seed)
        model = make_model()
        sgd = torch.optim.SGD(model.parameters(), lr=lr)
        shuffler = random.Random(seed)
        order = list(range(len(train_batches)))
        for _ in range(epochs):
            model.train()
            shuffler.shuffle(order)
            for i in order:
                inputs, labels = train_batches[i]
                loss = torch.nn.functional.cross_entropy(model(inputs), labels, reduction="sum") / len(labels)
                sgd.zero_grad()
                loss.backward()
                sgd.step()
            model.eval()
            with torch.no_grad():
                seen = sum(int((model(x).argmax(-1) == y).sum()) for x, y in train_batches)
            assert seen >= 0
        model.eval()
        with torch.no_grad():
            chunks = [model(x).argmax(-1) for x in eval_batch[0].split(150)]
        table.append(torch.cat(chunks) == eval_batch[1])
    return torch.stack(table)
''' + source[end:]


CORRECT = {"python loops": lambda: LOOPS, "numpy": lambda: NUMPY, "another order, monitoring, chunks": another_recipe}

LOSS_CE, LOSS_MEAN, LOSS_NAN = ("test_cross_entropy_of_each_target", "test_mean_over_the_sentence_targets_only",
                                "test_sentence_without_targets_is_nan")
PI_DIFF, PI_PAIR, PI_Q, PI_SEED = ("test_difference_is_the_mean_of_a_minus_b",
                                   "test_both_models_resampled_on_the_same_sentences",
                                   "test_paired_interval_quantiles", "test_paired_interval_seed")
ACC, ACC_Q, ACC_FIXED, ACC_SEED = ("test_accuracy_is_the_seed_average", "test_accuracy_interval_resamples_sentences",
                                   "test_accuracy_interval_holds_the_seeds_fixed", "test_accuracy_interval_seed")
T_DIFF, T_SIG, T_SEEDS, T_SAME, T_P, T_SEED = (
    "test_difference_of_seed_averaged_accuracies", "test_planted_difference_is_significant",
    "test_seeds_are_resampled", "test_identical_models_get_p_1", "test_p_counts_the_observed_data",
    "test_paired_seed_test_seed")
PI_N, ACC_N = "test_paired_interval_honours_n_resamples", "test_accuracy_interval_honours_n_resamples"
F_ROWS, F_INIT, F_EVAL, F_ORDER, F_TRAIN, F_FRESH, F_LR = (
    "test_rows_are_each_seeds_correctness", "test_each_model_initialised_from_its_seed", "test_evaluated_in_eval_mode",
    "test_data_order_drawn_from_each_seed", "test_trained_in_training_mode", "test_fresh_optimizer_per_seed",
    "test_lr_and_epochs_are_arguments")
F_REUSE, F_LOSS = "test_new_batch_order_each_epoch", "test_loss_is_the_batch_mean"
PART6 = frozenset({F_ROWS, F_INIT, F_EVAL, F_ORDER, F_TRAIN, F_FRESH, F_LR, F_REUSE, F_LOSS})
ACC_DISAGREE = "test_accuracy_interval_on_seeds_that_disagree"
T_SENTENCES = "test_sentences_are_resampled_with_the_seeds"
SEEDED = "        torch.manual_seed(seed)  # the seed decides the initial weights...\n"
V_AHEAD, V_NOISE, V_ALPHA = ("test_verdict_names_the_model_ahead", "test_verdict_within_the_noise",
                             "test_verdict_alpha_is_an_argument")

A_MINUS_B = "diff = torch.as_tensor(losses_a, dtype=torch.float64) - torch.as_tensor(losses_b, dtype=torch.float64)"
B_MINUS_A = A_MINUS_B.replace("losses_a", "LOSSES").replace("losses_b", "losses_a").replace("LOSSES", "losses_b")
DIFF_LINE = ("    " + A_MINUS_B +
             "\n    generator = torch.Generator().manual_seed(seed)\n    picks = torch.randint(len(diff), "
             "(n_resamples, len(diff)), generator=generator)\n    resampled = diff[picks].mean(1)\n")
PER_SENTENCE = "    per_sentence = torch.as_tensor(correct, dtype=torch.float64).mean(0)"
ACC_QUANTILES = ("    resampled = per_sentence[picks].mean(1)\n"
                 "    q = torch.tensor([alpha / 2, 1 - alpha / 2], dtype=torch.float64)\n")
ACC_PICKS = "    picks = torch.randint(len(per_sentence), (n_resamples, len(per_sentence)), generator=generator)\n"

OWN_WWM, OWN_SEEDS = ("test_conclusion_on_lesson2_follows_your_interval",
                      "test_conclusion_on_the_shipped_models_follows_your_test")


def recording(*, wwm: str | None = None, answer_wwm: str | None = None, seeds: str | None = None,
              answer_seeds: str | None = None) -> str:
    """The solution with part 7's recorded numbers and letters replaced (those given)."""
    source = solution()
    for name, value in (("wwm_measured", wwm), ("answer_wwm", answer_wwm and f'"{answer_wwm}"'),
                        ("seeds_measured", seeds), ("answer_seeds", answer_seeds and f'"{answer_seeds}"')):
        if value is not None:
            source, count = re.subn(rf"^    {name} = .*$", f"    {name} = {value}", source, flags=re.M)
            assert count == 1, name
    return source


WRONG = {
    # part 1
    "log-softmax over the positions": (
        mutate(("torch.log_softmax(logits.float(), dim=-1)", "torch.log_softmax(logits.float(), dim=1)")),
        {LOSS_CE, LOSS_MEAN}),
    "probabilities instead of log-probabilities": (
        mutate(("torch.log_softmax(logits.float(), dim=-1)", "torch.softmax(logits.float(), dim=-1)")),
        {LOSS_CE, LOSS_MEAN}),
    "summed over the targets": (
        mutate(("return nll.sum(1) / targets.sum(1)", "return nll.sum(1)")), {LOSS_MEAN}, {LOSS_CE}),
    "mean over every position": (
        mutate(("return nll.sum(1) / targets.sum(1)", "return nll.sum(1) / labels.shape[1]")), {LOSS_MEAN}, {LOSS_CE}),
    "one mean for the whole batch": (
        mutate(("return nll.sum(1) / targets.sum(1)", "return (nll.sum() / targets.sum()).expand(len(labels))")),
        {LOSS_CE, LOSS_MEAN}),
    "0 for a sentence without targets": (
        mutate(("return nll.sum(1) / targets.sum(1)", "return nll.sum(1) / targets.sum(1).clamp(min=1)")),
        {LOSS_NAN}, {LOSS_CE, LOSS_MEAN}),
    # part 2
    "B minus A": (
        mutate((A_MINUS_B, B_MINUS_A)),
        {PI_DIFF, PI_PAIR}),
    "each model resampled on its own": (
        mutate((DIFF_LINE, DIFF_LINE.replace(
            "    resampled = diff[picks].mean(1)\n",
            "    other = torch.randint(len(diff), (n_resamples, len(diff)), generator=generator)\n"
            "    a = torch.as_tensor(losses_a, dtype=torch.float64)\n"
            "    b = torch.as_tensor(losses_b, dtype=torch.float64)\n"
            "    resampled = a[picks].mean(1) - b[other].mean(1)\n"))),
        {PI_PAIR, PI_Q}, {PI_DIFF}),
    "unhalved alpha (paired interval)": (
        mutate((DIFF_LINE + "    q = torch.tensor([alpha / 2, 1 - alpha / 2], dtype=torch.float64)",
                DIFF_LINE + "    q = torch.tensor([alpha, 1 - alpha], dtype=torch.float64)")),
        {PI_Q}, {PI_DIFF, PI_PAIR, PI_SEED}),
    "a normal-approximation interval (paired)": (
        mutate((DIFF_LINE + "    q = torch.tensor([alpha / 2, 1 - alpha / 2], dtype=torch.float64)\n"
                "    low, high = torch.quantile(resampled, q).tolist()\n",
                DIFF_LINE + "    z = torch.distributions.Normal(0.0, 1.0).icdf(torch.tensor(1 - alpha / 2)).item()\n"
                "    spread = z * resampled.std(unbiased=False).item()\n"
                "    low, high = diff.mean().item() - spread, diff.mean().item() + spread\n")),
        {PI_Q}, {PI_DIFF, PI_PAIR, PI_SEED, PI_N}),
    "sentences drawn without replacement": (
        mutate(("    picks = torch.randint(len(diff), (n_resamples, len(diff)), generator=generator)",
                "    picks = torch.stack([torch.randperm(len(diff), generator=generator)\n"
                "                         for _ in range(n_resamples)])")),
        {PI_Q}, {PI_DIFF}),  # every resample is the whole set: a zero-width interval up to rounding
    "the global generator (paired interval)": (
        mutate(("    picks = torch.randint(len(diff), (n_resamples, len(diff)), generator=generator)",
                "    picks = torch.randint(len(diff), (n_resamples, len(diff)))")),
        {PI_SEED}, {PI_DIFF, PI_PAIR, PI_Q}),
    # part 3
    "the first seed only": (
        mutate((PER_SENTENCE, "    per_sentence = torch.as_tensor(correct, dtype=torch.float64)[0]")),
        {ACC, ACC_FIXED}, {ACC_Q}),
    "(seed, sentence) cells resampled": (
        mutate((PER_SENTENCE, "    per_sentence = torch.as_tensor(correct, dtype=torch.float64).flatten()")),
        {ACC_Q, ACC_FIXED}, {ACC}),
    "seeds resampled in the accuracy interval": (
        mutate((PER_SENTENCE, "    rows = torch.as_tensor(correct, dtype=torch.float64)\n"
                              "    per_sentence = rows.mean(0)"),
               (ACC_PICKS + "    resampled = per_sentence[picks].mean(1)\n",
                ACC_PICKS + "    seeds = torch.randint(len(rows), (n_resamples, len(rows)), generator=generator)\n"
                "    resampled = torch.stack([rows[s][:, c].mean() for s, c in zip(seeds, picks)])\n")),
        {ACC_FIXED}, {ACC, ACC_Q}),
    "a normal-approximation interval (accuracy)": (
        mutate((ACC_QUANTILES + "    low, high = torch.quantile(resampled, q).tolist()\n",
                ACC_QUANTILES +
                "    z = torch.distributions.Normal(0.0, 1.0).icdf(torch.tensor(1 - alpha / 2)).item()\n"
                "    spread = z * resampled.std(unbiased=False).item()\n"
                "    low, high = per_sentence.mean().item() - spread, per_sentence.mean().item() + spread\n")),
        {ACC_Q, ACC_DISAGREE}, {ACC, ACC_FIXED, ACC_SEED, ACC_N}),
    "per-seed intervals averaged": (
        mutate((ACC_PICKS + ACC_QUANTILES + "    low, high = torch.quantile(resampled, q).tolist()\n",
                ACC_PICKS + ACC_QUANTILES +
                "    rows = torch.as_tensor(correct, dtype=torch.float64)\n"
                "    ends = torch.stack([torch.quantile(row[picks].mean(1), q) for row in rows])\n"
                "    low, high = ends.mean(0).tolist()\n")),
        {ACC_DISAGREE}, {ACC, ACC_Q, ACC_FIXED, ACC_SEED, ACC_N}),
    "unhalved alpha (accuracy interval)": (
        mutate((ACC_QUANTILES, ACC_QUANTILES.replace("[alpha / 2, 1 - alpha / 2]", "[alpha, 1 - alpha]"))),
        {ACC_Q}, {ACC, ACC_FIXED, ACC_SEED}),
    "the seed ignored (accuracy interval)": (
        mutate((ACC_PICKS, ACC_PICKS.replace("generator=generator", "generator=torch.Generator().manual_seed(0)"))),
        {ACC_SEED}, {ACC, ACC_Q, ACC_FIXED}),
    # part 4
    "B minus A in the test": (
        mutate(("    observed = a.mean().item() - b.mean().item()", "    observed = b.mean().item() - a.mean().item()"),
               ("    diffs = resampled(a) - resampled(b)", "    diffs = resampled(b) - resampled(a)")),
        {T_DIFF, T_SIG}),
    "the two models resampled on different sentences": (
        mutate(("        return rows.gather(2, sentences.expand(-1, scores.shape[0], -1)).mean((1, 2))",
                "        own = torch.randint(n, (n_resamples, 1, n), generator=generator)\n"
                "        return rows.gather(2, own.expand(-1, scores.shape[0], -1)).mean((1, 2))")),
        {T_SIG}, {T_DIFF}),
    "resampled differences not centred": (
        mutate(("    extreme = int(((diffs - observed).abs() >= abs(observed) - 1e-12).sum())",
                "    extreme = int((diffs.abs() >= abs(observed) - 1e-12).sum())")),
        {T_SIG}, {T_DIFF}),
    "seeds held fixed in the test": (
        mutate(("        seeds = torch.randint(scores.shape[0], (n_resamples, scores.shape[0]), generator=generator)",
                "        seeds = torch.arange(scores.shape[0]).expand(n_resamples, -1)")),
        {T_SEEDS}, {T_DIFF, T_SIG, T_SAME, T_P}),
    "sentences held fixed in the test (seeds resampled alone)": (
        mutate(("    sentences = torch.randint(n, (n_resamples, 1, n), generator=generator)",
                "    sentences = torch.arange(n).expand(n_resamples, 1, n)")),
        {T_SENTENCES}, {T_DIFF, T_SIG, T_SEEDS, T_SAME, T_P, T_SEED}),
    "a one-sided p": (
        mutate(("    extreme = int(((diffs - observed).abs() >= abs(observed) - 1e-12).sum())",
                "    sign = 1.0 if observed >= 0 else -1.0\n"
                "    extreme = int(((diffs - observed) * sign >= abs(observed) - 1e-12).sum())")),
        {T_SAME}, {T_DIFF, T_SIG, T_SEEDS, T_SENTENCES, T_P}),
    "strict inequality": (
        mutate(("(diffs - observed).abs() >= abs(observed) - 1e-12", "(diffs - observed).abs() > abs(observed)")),
        {T_SAME}, {T_DIFF, T_SIG, T_P}),
    "p without the observed data": (
        mutate(("    return observed, (1 + extreme) / (1 + n_resamples)",
                "    return observed, extreme / n_resamples")),
        {T_P}, {T_DIFF, T_SIG, T_SEEDS, T_SAME}),
    "the global generator (test)": (
        mutate(("    generator = torch.Generator().manual_seed(seed)\n    n = a.shape[1]",
                "    generator = None\n    n = a.shape[1]")),
        {T_SEED}, {T_DIFF, T_SIG, T_SEEDS, T_SAME, T_P}),
    # part 5
    "the sign alone decides": (
        mutate(("    if p < alpha and difference > 0:", "    if difference > 0:"),
               ("    if p < alpha and difference < 0:", "    if difference < 0:")),
        {V_NOISE, V_ALPHA}, {V_AHEAD}),
    "p equal to alpha called a lead": (
        mutate(("    if p < alpha and difference > 0:", "    if p <= alpha and difference > 0:"),
               ("    if p < alpha and difference < 0:", "    if p <= alpha and difference < 0:")),
        {V_NOISE}, {V_AHEAD, V_ALPHA}),
    "alpha fixed at 0.05": (
        mutate(("    if p < alpha and difference > 0:", "    alpha = 0.05\n    if p < alpha and difference > 0:")),
        {V_ALPHA}, {V_AHEAD, V_NOISE}),
    "A and B swapped in the verdict": (
        mutate(('        return "A ahead beyond the noise"', '        return "B ahead beyond the noise"'),
               ('        return "B ahead beyond the noise"\n    return "no',
                '        return "A ahead beyond the noise"\n    return "no')),
        {V_AHEAD, V_NOISE, V_ALPHA}),
    "a fixed number of resamples (paired interval)": (
        mutate((DIFF_LINE, DIFF_LINE.replace("(n_resamples, len(diff))", "(2000, len(diff))"))),
        {PI_N}, {PI_DIFF, PI_PAIR, PI_SEED}),
    "a fixed number of resamples (accuracy interval)": (
        mutate((ACC_PICKS, ACC_PICKS.replace("(n_resamples, len(per_sentence))", "(2000, len(per_sentence))"))),
        {ACC_N}, {ACC, ACC_FIXED, ACC_SEED}),
    # part 6: each mistake fails its own check, and only it
    "predictions returned instead of right or wrong": (
        mutate(("rows.append(model(inputs).argmax(-1) == labels)", "rows.append(model(inputs).argmax(-1))")),
        {F_ROWS}, PART6 - {F_ROWS}),
    "seeded once, before the first seed": (
        mutate((SEEDED, ""), ("    for seed in seeds:\n", "    torch.manual_seed(seeds[0])\n    for seed in seeds:\n")),
        {F_INIT}, PART6 - {F_INIT}),
    "one model for every seed": (
        mutate(("        model = make_model()\n", "        model = model if rows else make_model()\n")),
        {F_INIT}, PART6 - {F_INIT}),
    "one optimizer for every seed": (
        mutate(("        optimizer = torch.optim.SGD(", "        optimizer = optimizer if rows else torch.optim.SGD(")),
        {F_FRESH}, PART6 - {F_FRESH}),
    "evaluated with dropout on": (
        mutate(("        model.eval()\n", "")), {F_EVAL}, PART6 - {F_EVAL}),
    "trained in the mode the model arrived in": (
        mutate(("        model.train()\n", "")), {F_TRAIN}, PART6 - {F_TRAIN}),
    "the order drawn from the global generator": (
        mutate(("torch.randperm(len(train_batches), generator=order)", "torch.randperm(len(train_batches))")),
        {F_ORDER}, PART6 - {F_ORDER}),
    "one order reused every epoch": (
        mutate(("        for _ in range(epochs):\n            for i in torch.randperm(len(train_batches), "
                "generator=order).tolist():\n",
                "        once = torch.randperm(len(train_batches), generator=order).tolist()\n"
                "        for _ in range(epochs):\n            for i in once:\n")),
        {F_REUSE}, PART6 - {F_REUSE}),
    "a loss summed over the batch": (
        mutate(("loss = torch.nn.functional.cross_entropy(model(batch_inputs), batch_labels)",
                "loss = torch.nn.functional.cross_entropy(model(batch_inputs), batch_labels, reduction=\"sum\")")),
        {F_LOSS}, PART6 - {F_LOSS}),
    "a fixed learning rate": (
        mutate(("model.parameters(), lr=lr)", "model.parameters(), lr=0.1)")), {F_LR}, PART6 - {F_LR}),
    "one epoch whatever epochs says": (
        mutate(("        for _ in range(epochs):\n", "        for _ in range(1):\n")), {F_LR}, PART6 - {F_LR}),
    # part 7: conclusions that do not follow from the recorded numbers (planted records, whatever the real run gave)
    "a lower loss read as the worse model": (
        recording(wwm="(-0.05, -0.08, -0.02)", answer_wwm="a"), {OWN_WWM}),
    "an interval around 0 read as a lead": (
        recording(wwm="(0.01, -0.01, 0.03)", answer_wwm="a"), {OWN_WWM}),
    "a lead beyond the noise undersold": (
        recording(seeds="(0.04, 0.002)", answer_seeds="a"), {OWN_SEEDS}),
    "one run generalised to every budget": (
        recording(seeds="(0.04, 0.002)", answer_seeds="c"), {OWN_SEEDS}),
    "p equal to alpha read as a lead": (
        recording(seeds="(-0.03, 0.05)", answer_seeds="d"), {OWN_SEEDS}),
    "the interval recorded in the wrong order": (
        recording(wwm="(-0.08, -0.05, -0.02)", answer_wwm="c"), {OWN_WWM}),
    # part 8
    "Q1: every question its own draw": (
        mutate(('    answer_q1 = "d"', '    answer_q1 = "a"')), {"test_q1_resampling_unit_of_a_grouped_test_set"}),
    "Q2: one seed's test speaks for the recipe": (
        mutate(('    answer_q2 = "b"', '    answer_q2 = "a"')), {"test_q2_what_a_one_seed_test_shows"}),
}

WELL_FORMED_NOTHING = PRELUDE + '''
def sentence_losses(logits, labels):
    return torch.zeros(len(labels))

def paired_interval(losses_a, losses_b, *, n_resamples=2000, alpha=0.05, seed=0):
    return 0.0, 0.0, 0.0

def accuracy_interval(correct, *, n_resamples=2000, alpha=0.05, seed=0):
    return 0.5, 0.0, 1.0

def paired_seed_test(correct_a, correct_b, *, n_resamples=2000, seed=0):
    return 0.0, 1.0

def verdict(difference, p, alpha=0.05):
    return "no difference beyond the noise"

def finetune_over_seeds(make_model, train_batches, eval_batch, seeds, *, epochs=1, lr=0.1):
    return torch.zeros(len(seeds), len(eval_batch[1]), dtype=torch.bool)

answer_q1 = answer_q2 = None
wwm_measured = seeds_measured = answer_wwm = answer_seeds = None
'''

STUBS = {"return the first argument": lambda: stubbed(solution(), "return"),
         "well-formed nothing": lambda: WELL_FORMED_NOTHING}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CORRECT))
def test_correct_implementation_passes_every_check(name):
    assert_passes_every_check(CHECKS, CORRECT[name](), name)


@pytest.mark.slow
def test_the_solution_notebook_passes_every_check():
    """The reference answer (the base every misconception edits), graded as the whole solution notebook."""
    assert_solution_passes_every_check(NOTEBOOK, "ex08-comparing-models")


BUNDLES = bundle_misconceptions(CHECKS, WRONG, solution())


@pytest.mark.slow
@pytest.mark.parametrize("bundle", BUNDLES, ids=bundle_ids(BUNDLES))
def test_misconception_fails_its_check(bundle):
    """Misconceptions that cannot move each other's checks, graded in one notebook (check_proofs.py)."""
    assert_bundle_caught(CHECKS, WRONG, solution(), bundle)


def test_bundled_misconceptions_cannot_move_each_others_checks():
    assert_bundles_sound(CHECKS, WRONG, solution(), BUNDLES)


def test_every_check_is_targeted_by_some_misconception_and_marked():
    assert_every_check_targeted(CHECKS, WRONG, set(graded_cells(NOTEBOOK)))


def test_check_points_add_up_to_the_cells_and_to_course_yml():
    assert_points_add_up(CHECKS, NOTEBOOK, "ex08-comparing-models")


@pytest.mark.slow
@pytest.mark.parametrize("stub", list(STUBS))
def test_stub_scores_zero(stub):
    source = STUBS[stub]()
    assert "### BEGIN SOLUTION" not in source
    assert_scores_zero(CHECKS, source, stub)


@pytest.mark.slow
def test_release_scores_zero():
    assert_release_scores_zero(RELEASE, "ex08-comparing-models")


# Issue 36: the hint a planted mistake gets names that mistake, and no other (each key phrase below is what one
# mistake's hint says); in parts 2-6 the mistake fails only the checks listed.
PART2 = frozenset({PI_DIFF, PI_PAIR, PI_Q, PI_SEED, PI_N})
PART3 = frozenset({ACC, ACC_Q, ACC_DISAGREE, ACC_FIXED, ACC_SEED, ACC_N})
PART4 = frozenset({T_DIFF, T_SIG, T_SEEDS, T_SENTENCES, T_SAME, T_P, T_SEED})
PART5 = frozenset({V_AHEAD, V_NOISE, V_ALPHA})
PART7 = frozenset({OWN_WWM, OWN_SEEDS})
SAYS = {"a normal-approximation interval (paired)": "z standard deviations",
        "a normal-approximation interval (accuracy)": "z standard deviations",
        "per-seed intervals averaged": "then averaged",
        "sentences held fixed in the test (seeds resampled alone)": "not only the seeds",
        "a one-sided p": "ONE side",
        "p equal to alpha called a lead": "p equal to alpha",
        "evaluated with dropout on": "evaluation ran with dropout still on",
        "trained in the mode the model arrived in": "dropout must be on while it learns",
        "one optimizer for every seed": "an optimizer made once",
        "the order drawn from the global generator": "global generator",
        "one order reused every epoch": "one order reused every epoch",
        "a loss summed over the batch": "a sum over the batch",
        "a lower loss read as the worse model": "the sign",
        "an interval around 0 read as a lead": "cannot tell the two models apart",
        "a lead beyond the noise undersold": "undersells",
        "one run generalised to every budget": "says nothing about every",
        "p equal to alpha read as a lead": "cannot tell the two models apart"}
HINTS = {"a normal-approximation interval (paired)": (PART2, {PI_Q}),
         "a normal-approximation interval (accuracy)": (PART3, {ACC_Q, ACC_DISAGREE}),
         "per-seed intervals averaged": (PART3, {ACC_DISAGREE}),
         "sentences held fixed in the test (seeds resampled alone)": (PART4, {T_SENTENCES}),
         "a one-sided p": (PART4, {T_SAME}),
         "p equal to alpha called a lead": (PART5, {V_NOISE}),
         **{name: (PART6, wrong_entry(WRONG[name])[1]) for name in (
             "evaluated with dropout on", "trained in the mode the model arrived in", "one optimizer for every seed",
             "the order drawn from the global generator", "one order reused every epoch",
             "a loss summed over the batch")},
         **{name: (PART7, wrong_entry(WRONG[name])[1]) for name in (
             "a lower loss read as the worse model", "an interval around 0 read as a lead",
             "a lead beyond the noise undersold", "one run generalised to every budget")}}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(HINTS))
def test_the_hint_names_the_mistake_made(name):
    among, failing = HINTS[name]
    assert_hints_name(CHECKS, wrong_entry(WRONG[name])[0], set(among), dict.fromkeys(failing, SAYS[name]),
                      tuple(words for other, words in SAYS.items() if words != SAYS[name]))

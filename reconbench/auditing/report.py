"""The audit's report: one self-contained HTML page (inline style, figures embedded as data URIs, no script), written
beside the JSON record it is rendered from."""

from __future__ import annotations

import base64
import html
from pathlib import Path

from reconbench.provenance import write_text_atomic
from reconbench.records.audit import AuditRecord

REPORT_FILE = "report.html"

#: what each number means, and what it does not (shown on the page and named in docs/audit.md)
MEANINGS = (
    ("reconstructed (calibrated headline)",
     "training images that some reconstruction correlates with better than any random held-out image did in the "
     "calibration draws: a set of random held-out images passes it with probability at most 1 / (draws + 1) (5% for "
     "19 draws). Above its null: the attack recovered those images from the weights.",
     "not the number of images an attacker can recover: a stronger attack, a larger budget or another search may "
     "recover more. A count of 0 is no proof of safety, above all when the regime check fails or is unavailable."),
    ("reconstructed (papers' protocol, SSIM > 0.4)",
     "the count the papers report, for comparison with them.",
     "calibrated: random images of the same distribution can pass it (compare its null)."),
    ("membership AUC",
     "how well the reconstructions separate the training images from 10 x n held-out images (each scores its highest "
     "correlation with any reconstruction): 0.5 is chance, 1 is perfect separation.",
     "an attack on your model's membership in general: it measures only what these reconstructions reveal."),
    ("TPR at 1% FPR",
     "the share of training images flagged as members when 1% of non-members are.",
     "reliable below about 100 non-members (1% of them is one image): read it with its null."),
    ("membership precision",
     "for the images counted reconstructed by the papers' protocol, the share whose reconstruction is nearer a training "
     "image than every decoy held-out image.",
     "defined only when something was counted reconstructed."),
)


def _img(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()


def _num(v: object, fmt: str = ".3g") -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return str(v)
    return format(float(v), fmt) if isinstance(v, float) else str(v)


def _verdict(rec: AuditRecord) -> str:
    head, regime = rec.headline, rec.regime
    if not head.available:
        return f"No calibrated headline: {head.reason}."
    count, null_max = head.reconstructed, head.null_max
    if count and count > (null_max or 0):
        return (f"{count} of {head.n_train} training images were reconstructed beyond chance: the released weights "
                "leak these training images.")
    if regime.gate_verdict == "passes":
        return ("No training image was reconstructed beyond chance with this budget, on a model inside the attacks' "
                "regime. A larger budget or another attack may still recover images.")
    return ("No training image was reconstructed beyond chance with this budget. The model's regime is "
            f"{'outside the attacks' if regime.gate_verdict == 'fails' else 'not established (θ0 unknown)'}: "
            "a low count here is not proof that the weights do not leak.")


def render(rec: AuditRecord, out: Path) -> str:
    e = html.escape
    inp, model, regime, head = rec.inputs, rec.model, rec.regime, rec.headline
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        "<title>reconbench audit: " + e(Path(str(inp.weights)).name) + "</title><style>",
        "body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}",
        "table{border-collapse:collapse;margin:.5rem 0}td,th{border:1px solid #ccc;padding:.25rem .5rem;text-align:left}",
        "th{background:#f3f3f3}.headline{font-size:1.3rem;padding:.8rem;border:2px solid #2a7;background:#f4fbf6}",
        ".warn{border-color:#c80;background:#fff8ec}pre{background:#f6f6f6;padding:.6rem;white-space:pre-wrap}",
        "img{max-width:100%;image-rendering:pixelated}", "</style></head><body>",
        "<h1>Reconstruction audit</h1>",
        f"<p>Weights <code>{e(str(inp.weights))}</code> (sha256 <code>{e(inp.weights_sha256[:16])}…</code>), "
        f"architecture <code>{e(inp.family)}</code>, {e(inp.task)} task, {inp.n_train} training images "
        f"{e('x'.join(map(str, inp.image_shape)))}, {inp.held_out_images} held-out images.</p>",
    ]
    warn = not head.available or regime.gate_verdict != "passes"
    parts.append(f"<p id='headline' class='headline{' warn' if warn else ''}'>{e(_verdict(rec))}</p>")
    if head.available:
        parts.append(
            f"<p>Calibrated headline: <b id='headline-count'>{head.reconstructed} of {head.n_train}</b> "
            f"({e(str(head.attack))}; correlation threshold {_num(head.threshold)}); held-out null: mean "
            f"{_num(head.null_mean, '.2g')}, max {_num(head.null_max, '.0f')}. Membership AUC "
            f"{_num(head.membership_auc, '.2f')} (null {_num(head.membership_auc_null_mean, '.2f')}).</p>")
    parts.append("<h2>Attacks</h2>")
    for a in rec.attacks:
        parts.append(f"<h3>{e(a.attack)}</h3><p>{a.search_runs} search run(s), config "
                     f"<code>{e(str(dict(a.config)))}</code>, {a.wall_seconds:.0f} s; outcome "
                     f"{e(str(a.outcome.status))}. Every number: <code>{e(a.result)}</code>.</p>")
        if not a.null_available:
            parts.append(f"<p>No held-out null: {e(str(a.null_reason))}</p>")
        parts.append(f"<table class='numbers' data-attack='{e(a.attack)}'><tr><th>number</th><th>attack</th>"
                     f"<th>held-out null: mean (sd), max over {a.null_draws or 0} draws</th></tr>")
        for label, key in (("reconstructed (calibrated headline)", "reconstructed_calibrated"),
                           ("reconstructed (papers' protocol)", "reconstructed"),
                           ("membership AUC", "membership_auc"), ("TPR at 1% FPR", "membership_tpr_at_fpr"),
                           ("membership precision", "membership_precision")):
            n = a.numbers[key]
            parts.append(f"<tr><td>{e(label)}</td><td data-key='{key}'>{_num(n.value)}</td><td>"
                         f"{_num(n.null_mean)} ({_num(n.null_sd, '.2g')}), {_num(n.null_max)}</td></tr>")
        parts.append("</table>")
        if a.figure and (out / a.figure).is_file():
            parts.append(f"<figure><img alt='reconstructions of {e(a.attack)} above the training images they "
                         f"matched' src='{_img(out / a.figure)}'><figcaption>Upper rows: reconstructions; lower rows: "
                         "the training images they matched, best first; framed in green: pairs that pass the calibrated "
                         "headline; #i: the training image's index in the training file, SSIM: the papers' score of "
                         "the pair, d: its matching distance.</figcaption></figure>")
    for r in rec.refused:
        parts.append(f"<p class='refused'>Not run: <b>{e(r.attack)}</b>: {e(r.reason)}</p>")
    parts.append("<h2>Is the model in the attacks' regime?</h2><table>")
    gate = regime.learned_ratio
    parts.append(f"<tr><td>learned-part gate (residual ratio of θ − θ0 ≤ {regime.gate})</td><td id='gate'>"
                 f"{e(regime.gate_verdict)}{'' if gate is None else ' (' + _num(gate) + ')'}</td></tr>")
    parts.append(f"<tr><td>stationarity ratio of θ (diagnostic)</td><td>{_num(regime.stationarity_ratio)} "
                 f"(residual {_num(regime.residual_at_train)} at the training images, "
                 f"{_num(regime.residual_at_random)} at random inputs)</td></tr>")
    parts.append(f"<tr><td>θ0 (initial weights) known</td><td>{'yes' if regime.theta0_available else 'no'}</td></tr>"
                 "</table>")
    if regime.gate_reason:
        parts.append(f"<p>{e(regime.gate_reason)}.</p>")
    parts.append("<p>The KKT attacks assume that training drove the weights to a stationary point of the max-margin "
                 "problem, so that the learned weights are a combination of gradients at the training images. The gate "
                 "measures that premise for the part of the weights training wrote (docs/regime.md).</p>")
    parts.append(f"<h2>The model</h2><p>{model.param_count:,} parameters; training error "
                 f"{_num(model.train_error, '.3f')}, held-out error {_num(model.held_out_error, '.3f')} (on "
                 f"{model.held_out_scored} held-out images); {e(model.loss)} loss on the training set "
                 f"{_num(model.train_loss)}.</p>")
    parts.append("<h2>What the numbers mean, and what they do not</h2><table><tr><th>number</th><th>means</th>"
                 "<th>does not mean</th></tr>")
    for name, means, not_means in MEANINGS:
        parts.append(f"<tr><td>{e(name)}</td><td>{e(means)}</td><td>{e(not_means)}</td></tr>")
    parts.append("</table>")
    parts.append("<h2>Reproduce</h2><pre id='command'>" + e(rec.command) + "</pre>")
    parts.append(f"<p>Training file sha256 <code>{e(inp.train_sha256)}</code>, held-out file sha256 "
                 f"<code>{e(inp.held_out_sha256)}</code>; reconbench {e(str(rec.provenance.reconbench_version))}"
                 f", commit {e(str(rec.provenance.git_commit))}. The JSON record: <code>audit.json</code>.</p>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(out: Path, rec: AuditRecord) -> Path:
    path = out / REPORT_FILE
    write_text_atomic(path, render(rec, out))
    return path

"""`reconbench doctor`: which BLAS multiplies, on which kernel branch, and how fast against the processor's peak."""

from __future__ import annotations

import json

import click

from reconbench.cli.common import main_group


@main_group.command("doctor")
@click.option("--seconds", type=click.FloatRange(0.01, 60), default=0.3, show_default=True,
              help="Time spent measuring each product shape and dtype.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def doctor_command(seconds: float, as_json: bool) -> None:
    """Measure one-thread matrix-product GFLOP/s at the attack step's shapes and compare with the processor's peak.

    Names torch's BLAS, the kernel branch MKL chose, the CPU and its vector instruction set, and says what to do
    when the products run far below the expected peak (on AMD processors: RECONBENCH_FAST_BLAS=1). Last, whether
    the LPIPS metric can be computed here, and if not the whole reason with its fix.
    """
    from reconbench import blas
    from reconbench.evaluation.lpips_metric import availability

    report = blas.examine(seconds)
    lpips_ok, lpips_detail = availability()
    if as_json:
        out = {**report.__dict__, "advice": blas.advice(report), "line": blas.provenance_line(report.summary()),
               "lpips": {"available": lpips_ok, ("backbone" if lpips_ok else "reason"): lpips_detail}}
        click.echo(json.dumps(out, indent=1))
        return
    version = f" {report.mkl_version}" if report.mkl_version else ""
    click.echo(f"BLAS:        torch uses {report.blas}{version}")
    if report.branch is not None:
        click.echo(f"kernels:     MKL branch {report.branch}")
    state = "on (MKL's processor check answered by the shim)" if report.fast_path else "off"
    if report.fast_path and report.blas != "mkl":
        state = f"on, without effect: torch's BLAS is {report.blas}, not MKL"
    click.echo(f"fast path:   {state}" + (f"; {report.fast_path_note}" if report.fast_path_note else ""))
    clock = f", {report.clock_ghz:.2f} GHz reported" if report.clock_ghz else ""
    click.echo(f"processor:   {report.cpu_model} ({report.vendor or 'unknown vendor'}), {report.isa}{clock}")
    for dtype, shapes in report.gflops.items():
        peak = report.peak[dtype]
        vs = f"; expected peak {peak:.0f} ({report.best(dtype) / peak:.0%})" if peak else ""
        if peak and report.best(dtype) > peak:
            vs += ", above it: the core runs faster than its reported clock"
        cells = ", ".join(f"{shape} {g:.1f}" for shape, g in shapes.items())
        click.echo(f"{dtype}:     {cells} GFLOP/s on 1 thread{vs}")
    lines = blas.advice(report)
    if lines:
        click.echo("advice:")
        for line in lines:
            click.echo(f"  - {line}")
    else:
        click.echo("advice:      none; the products run near the expected peak")
    # the whole reason the one-line LPIPS note of `run` points here for
    click.echo(f"LPIPS:       available (AlexNet backbone {lpips_detail})" if lpips_ok else
               f"LPIPS:       unavailable: {lpips_detail}")

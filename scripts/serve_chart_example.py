"""Regenerate docs/img/serve-latency-throughput.svg, the README's serving chart: Llama-3.1-8B on one
H100 SXM (vLLM, BF16), 1,000 prompt + 1,000 answer tokens, TTFT and TPOT P90 against output
tokens/s per GPU as the Poisson rate grows to saturation (the `whichgpu serve --html` panels), with
the README example's SLOs (TTFT 500 ms, TPOT 20 ms).

    python scripts/serve_chart_example.py
"""

from __future__ import annotations

from pathlib import Path

from whichgpu.commands.serve import serve_run
from whichgpu.report.serve import latency_chart

OUT = Path(__file__).resolve().parents[1] / "docs" / "img" / "serve-latency-throughput.svg"


def main() -> None:
    rep = serve_run("llama-3.1-8b", gpu="h100", rate=5.0, input_len=1000, output_len=1000, slo_ttft_ms=500,
                    slo_tpot_ms=20, sweep=True)
    ttft, tpot = latency_chart(rep, "ttft"), latency_chart(rep, "tpot")
    w, h = 880, 300
    body = (ttft.replace('<svg xmlns="http://www.w3.org/2000/svg"', '<svg x="0" y="0"', 1)
            + tpot.replace('<svg xmlns="http://www.w3.org/2000/svg"', '<svg x="440" y="0"', 1))
    OUT.write_text(f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
                   f'font-family="sans-serif"><rect width="{w}" height="{h}" fill="white"/>{body}</svg>\n')
    assert rep.slo is not None and rep.ceiling_per_s is not None
    print(f"wrote {OUT}: saturation {rep.ceiling_per_s:.2f} requests/s, SLO rate {rep.slo.max_rate_per_s:.2f}")


if __name__ == "__main__":
    main()

"""tools/bench.py's report: the printed tables with PASS/FAIL per target, and the plot."""
from __future__ import annotations

import math

import common  # tools/common.py


def _ratio(x):
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x:.1f}" if x < 1000 else f"{x:.0e}"


def pf(flag):
    return "-" if flag is None else ("PASS" if flag else "FAIL")


def loads_line(report):
    loads = report.get("dependent_loads") or {}
    return "dependent cold loads " + ", ".join(
        f"{h}: {common.fmt_us(t.get('median_us'))}" for h, t in loads.items()) + " µs"


def print_tables(report):
    lines = []
    env = report["env"]
    lines.append(f"device {env.get('device')} | torch {env.get('torch')} | triton "
                 f"{env.get('triton')} | {env.get('date')} | dispatch target "
                 f"{report.get('hardware_detected')}")
    lines.append(f"copy BW {report['copy_bw']['tb_per_s']:.2f} TB/s (read+write) | empty kernel "
                 f"{common.fmt_us(report['empty_kernel']['median_us'])} µs | times: median µs, "
                 f"graph replay, L2 flushed ({common.FLUSH_MODE})")
    if report.get("dependent_loads"):
        lines.append(f"latency: {loads_line(report)} (one warp, cold memory, then one store)")
    router = report.get("router") or []
    if router:
        lines.append("")
        lines.append("router GEMM: µs; target on ours-empty: ≤ 1.3·floor+0.5 (M ≤ 8), "
                     "≤ 2·floor+1 (M = 32)")
        lines.append("  (w-read: reading the weight alone, best of 1-16 programs per row, minus "
                     "the empty kernel: what a one-pass kernel cannot go below)")
        lines.append(f"{'shape':<12}{'M':>3} {'x':<5}{'ours':>7}{'linear':>8}{'floor':>7}"
                     f"{'w-read':>7}{'ours-empty':>11}{'target':>8}")
        for r in router:
            lines.append(f"({r['K']},{r['N']})".ljust(12)
                         + f"{r['M']:>3} {r['x_dtype']:<5}"
                         f"{common.fmt_us(r['ours'].get('median_us')):>7}"
                         f"{common.fmt_us(r.get('linear', {}).get('median_us')):>8}"
                         f"{common.fmt_us(r['floor_us']):>7}"
                         f"{common.fmt_us(r.get('w_read_minus_empty_us')):>7}"
                         f"{common.fmt_us(r.get('ours_minus_empty_us')):>11}"
                         f"{common.fmt_us(r.get('target_us')):>8} {pf(r.get('target_pass'))}")
    decode = report.get("decode") or []
    if decode:
        tp = decode[0]["target_policy"]
        policies = decode[0]["policies"]
        lines.append("")
        lines.append(f"decode indexer end to end (scores + top-16 + page-16 table), H=1 D=128: µs;"
                     f" x_flr, TB/s for {tp}")
        lines.append(f"{'scenario':<18}" + "".join(f"{hw:>8}" for hw in policies)
                     + f"{'torch':>8}{'floor':>7}{'x_flr':>6}{'TB/s':>6}  target")
        for r in decode:
            o = r["ours"]
            cells = "".join(f"{common.fmt_us(o.get(hw, {}).get('median_us')):>8}"
                            for hw in policies)
            main = o.get(tp, {})
            t = r["torch"].get("median_us")
            extra = ""
            if r.get("target_us") is not None:
                extra = f"  ≤{r['target_us']:g} {pf(r.get('target_pass'))}"
            if r.get("policies_agree") is False:
                extra += " DISAGREE"
            if "rows" in r and r["match_rows"] != r["rows"]:
                extra += f" torch-match {r['match_rows']}/{r['rows']}"
            if any(v.get("graph") is False for v in o.values()) and report.get("mode") != "smoke":
                extra += " (eager timing)"
            xf, tb = main.get("x_floor"), main.get("tb_per_s")
            lines.append(f"{r['name']:<18}{cells}"
                         f"{common.fmt_us(t) if t is not None else 'skip':>8}"
                         f"{common.fmt_us(r['floor_us']):>7}"
                         f"{_ratio(xf):>6}"
                         f"{'-' if tb is None else f'{tb:.2f}':>6}{extra}")
    lines.append("")
    lines.append("targets:" + (" not evaluated in --smoke (CPU interpreter timings)"
                               if report.get("mode") == "smoke" else ""))
    n_pass = n_fail = 0
    for r in decode:
        if r.get("target_us") is not None:
            flag = r.get("target_pass")
            n_pass += flag is True
            n_fail += flag is not True
            got = r["ours"].get(r.get("target_policy"), {}).get("median_us")
            alt = r.get("ours_other_flush") or {}
            lines.append(f"  decode {r['name']:<16s} {common.fmt_us(got):>7} µs ≤ "
                         f"{r['target_us']:g}  {pf(flag)}"
                         + (f"  ({alt['flush']} flush: {common.fmt_us(alt['median_us'])} µs)"
                            if alt.get("median_us") is not None else ""))
    rp = [r for r in router if r.get("target_us") is not None]
    if rp:
        ok = [r for r in rp if r.get("target_pass") is True]
        bad = [r for r in rp if r.get("target_pass") is not True]
        n_pass += len(ok)
        n_fail += len(bad)
        lines.append(f"  router (ours-empty ≤ 1.3·floor+0.5 for M≤8, ≤ 2·floor+1 at M=32): "
                     f"{len(ok)}/{len(rp)} PASS"
                     + ("" if not bad else "; FAIL: " + ", ".join(
                         f"({r['K']},{r['N']}) M{r['M']} {r['x_dtype']}" for r in bad[:8])
                        + (" …" if len(bad) > 8 else "")))
    for err in report.get("errors", []):
        lines.append(f"  ERROR {err}")
    lines.append(f"TARGETS: {n_pass} PASS, {n_fail} FAIL | wall {report['wall_s']:.0f} s | "
                 f"{report['out']}")
    print("\n".join(lines), flush=True)
    return n_fail


def plot(report, path, targets: dict):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        common.say("plot skipped: matplotlib is not installed here")
        return False
    decode = [r for r in report.get("decode") or [] if r["ours"]]
    if not decode:
        common.say("plot skipped: no decode results")
        return False
    tp = decode[0]["target_policy"]
    qs = sorted({r["Q"] for r in decode})
    fig, axes = plt.subplots(1, len(qs), figsize=(6.5 * len(qs), 5), squeeze=False)
    rs = sorted({r["R"] for r in decode})
    cmap = plt.get_cmap("viridis")
    for ax, q in zip(axes[0], qs):
        for i, R in enumerate(rs):
            color = cmap(i / max(1, len(rs) - 1))
            rows = sorted((r for r in decode if r["Q"] == q and r["R"] == R and not r["mixed"]),
                          key=lambda r: r["ctx"])
            pts = [(r["ctx"], r["ours"].get(tp, {}).get("median_us"), r["floor_us"])
                   for r in rows]
            pts = [p for p in pts if p[1] is not None]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=color,
                        label=f"R={R}")
                ax.plot([p[0] for p in pts], [p[2] for p in pts], "--", color=color,
                        alpha=0.7)
            mixed = [r for r in decode if r["Q"] == q and r["R"] == R and r["mixed"]]
            for r in mixed:
                t = r["ours"].get(tp, {}).get("median_us")
                if t is not None:
                    ax.plot([r["ctx"]], [t], "*", color=color, markersize=12)
                    ax.plot([r["ctx"]], [r["floor_us"]], "x", color=color)
        tgt = [(k[1], v) for k, v in targets.items() if k[2] == q]
        if tgt:
            ax.plot([c for c, _ in tgt], [v for _, v in tgt], "v", color="red",
                    markerfacecolor="none", markersize=9, label="target (see table)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ctxs = sorted({r["ctx"] for r in decode})
        ax.set_xticks(ctxs, [f"{c // 1024}k" if c >= 1024 else str(c) for c in ctxs])
        ax.set_xlabel("context per request (tokens)")
        ax.set_ylabel("µs (median, graph replay, L2 flushed)")
        ax.set_title(f"index_decode + page-16 table, Q={q}, policy {tp}\n"
                     f"dashed: bandwidth floor; ★ mixed lengths (× its floor)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True

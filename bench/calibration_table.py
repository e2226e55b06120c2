"""Predicted against measured collective times from a `dtensor calibrate --out FILE` profile.

    python3 bench/calibration_table.py FILE [--check CHECK_FILE] [--min-bytes 65536] [--tolerance 25]

Prints a Markdown table per collective kind: per buffer size and group size, measured µs, bus
bandwidth, the profile's predicted µs (propagation/hardware.h: for a group size in the kind's
by_group_size, the range holding bytes_sent, latency + bytes_sent / bandwidth; else base + steps x
per-step latency + bytes_sent / bus bandwidth) and the error, then how many timings at or above
--min-bytes are within +-tolerance %. With --check, the measurements are CHECK_FILE's (another
calibrate run) and the predictions FILE's: a check on timings the fit did not see.
"""
import argparse
import json


def ring_steps(kind, n):
    return {"all_reduce": 2 * (n - 1), "send_recv": 1}.get(kind, n - 1)


def bytes_sent(kind, size, n):
    # comm_bytes_sent (dtensor/collectives/comm_kind.h), rounded down like it.
    if kind == "all_reduce":
        return 2 * size * (n - 1) // n
    if kind in ("all_gather", "reduce_scatter"):
        return size * (n - 1) // n
    if kind == "all_to_all":
        return size * (n - 1) // (n * n)
    return size


def predict(m, kind, size, n):
    sent = bytes_sent(kind, size, n)
    ranges = m.get("by_group_size", {}).get(str(n))
    if ranges:
        r = ranges[0]
        for cand in ranges:
            if cand["from_bytes"] <= sent:
                r = cand
        bw = r.get("bandwidth_GBps")
        return r["latency_us"] + (sent / (bw * 1e3) if bw else 0.0)
    return m["base_latency_us"] + m["latency_us"] * ring_steps(kind, n) + sent / (m["bandwidth_GBps"] * 1e3)


def describe(m):
    out = (f"{m['base_latency_us']:.1f} µs + {m['latency_us']:.2f} µs/step + bytes_sent / "
           f"{m['bandwidth_GBps']:.3f} GB/s (group sizes not measured)")
    for n, ranges in sorted(m.get("by_group_size", {}).items(), key=lambda kv: -int(kv[0])):
        parts = []
        for r in ranges:
            bw = r.get("bandwidth_GBps")
            term = f" + bytes_sent / {bw:.3f} GB/s" if bw else " (flat)"
            parts.append(f"from {human(r['from_bytes'])} B sent: {r['latency_us']:.0f} µs{term}")
        out += f"; {n} ranks: " + ", ".join(parts)
    return out


def human(b):
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= div and b % div == 0:
            return f"{b // div}{unit}"
    return str(b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("profile")
    ap.add_argument("--check", help="profile whose measurements are compared (default: the fitted one's)")
    ap.add_argument("--min-bytes", type=int, default=65536)
    ap.add_argument("--tolerance", type=float, default=25.0)
    a = ap.parse_args()
    p = json.load(open(a.profile))
    c = json.load(open(a.check)) if a.check else p
    print(f"Fit: profile `{p['name']}`: {p['description']}\n")
    if a.check:
        print(f"Measurements: `{a.check}`: {c['description']}\n")
    within = total = 0
    for kind, m in p["links"]["intra_host"]["collectives"].items():
        print(f"**{kind}**: {describe(m)}\n")
        measured = c["links"]["intra_host"]["collectives"][kind]["measured"]
        groups = sorted({t["ranks"] for t in measured}, reverse=True)
        by = {(t["ranks"], t["size"]): t["time_us"] for t in measured}
        head = " | ".join(f"{n} ranks: measured µs | busbw GB/s | predicted µs | error" for n in groups)
        print(f"| size | {head} |")
        print("|---:|" + "---:|" * (4 * len(groups)))
        for size in sorted({t["size"] for t in measured}):
            cells = []
            for n in groups:
                us = by.get((n, size))
                if us is None:
                    cells.append(" | | | ")
                    continue
                sent = bytes_sent(kind, size, n)
                pred = predict(m, kind, size, n)
                err = 100.0 * (pred - us) / us
                mark = ""
                if size >= a.min_bytes:
                    total += 1
                    if abs(err) <= a.tolerance:
                        within += 1
                    else:
                        mark = " **"
                cells.append(f"{us:.0f} | {sent / us / 1e3:.3f} | {pred:.0f} | {err:+.0f}%{mark}")
            print(f"| {human(size)} | " + " | ".join(cells) + " |")
        print()
    print(f"{within} of {total} timings of {human(a.min_bytes)} B and more within ±{a.tolerance:g}% "
          f"(** marks the others).")

if __name__ == "__main__":
    main()

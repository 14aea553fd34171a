"""What the comparison scripts (compare_*.py) share: the machine line and
Markdown tables. Imported from the scripts' folder."""

import platform


def cpu_model():
    """The CPU's model name (from /proc/cpuinfo where there is one)."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_isa():
    """The vector extensions that matter here (avx2, fma, avx512f, avx512_bf16,
    amx_tile ...) from /proc/cpuinfo's flags, or '?' where there is none."""
    wanted = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "amx_tile",
              "amx_bf16", "asimd", "sve")
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith(("flags", "Features")):
                have = set(line.split(":", 1)[1].split())
                return " ".join(f for f in wanted if f in have) or "baseline"
    except OSError:
        pass
    return "?"


def table(title, head, rows):
    """Prints a Markdown table under a level-3 title."""
    print(f"\n### {title}\n")
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" for _ in head) + "|")
    for r in rows:
        print("| " + " | ".join(r) + " |")

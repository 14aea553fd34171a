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


def table(title, head, rows):
    """Prints a Markdown table under a level-3 title."""
    print(f"\n### {title}\n")
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" for _ in head) + "|")
    for r in rows:
        print("| " + " | ".join(r) + " |")

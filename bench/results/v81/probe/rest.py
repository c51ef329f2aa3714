# The tests of gtest shard 1 of 4 not in shard1_done.txt (a shard cut by its timeout), as a --gtest_filter string.
import subprocess, sys
out = subprocess.run([sys.argv[1], "--gtest_list_tests"], capture_output=True, text=True).stdout
names, suite = [], None
for ln in out.splitlines():
    if not ln.strip():
        continue
    if not ln.startswith(" "):
        suite = ln.split("#")[0].strip()
        continue
    names.append(suite + ln.split("#")[0].strip())
done = set(open(sys.argv[2]).read().split())
rest = [n for i, n in enumerate(names) if i % 4 == 1 and n not in done]
print(":".join(rest) if rest else "NONE")

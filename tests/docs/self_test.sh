#!/usr/bin/env bash
# Plants a small documentation tree with a missing file, a missing anchor and
# good links of every kind the checker knows (a heading's slug, a repeated
# heading's -1, an explicit <a id>, a page's own anchor, an image), plus broken
# targets that must be ignored (in a code block, in inline code, a URL), and
# checks that check_links.py reports exactly the two bad ones and exits 1.
set -euo pipefail
checker=$(cd "$(dirname "$0")" && pwd)/check_links.py
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/docs"

cat > "$scratch/README.md" << 'EOF'
# Planted

A good link: [the guide](docs/guide.md#what-it-does), [its second
Setup](docs/guide.md#setup-1), [an explicit anchor](docs/guide.md#kept),
[this page](#planted) and ![a plot](docs/plot.png).
A missing file: [gone](docs/missing.md).
A missing anchor: [nowhere](docs/guide.md#no-such-heading).
Ignored: `[inline](docs/inline-missing.md)`, [a site](https://example.com/x.md#y),
[mail](mailto:someone@example.com).

```md
[in a code block](docs/fenced-missing.md)
```
EOF
cat > "$scratch/docs/guide.md" << 'EOF'
# Guide

Back to [README](../README.md#planted).

## What it does?

## Setup

## Setup

<a id="kept"></a>
EOF
printf 'not a real png' > "$scratch/docs/plot.png"

expected=(
  "README.md:6: link 'docs/missing.md': no file docs/missing.md"
  "README.md:7: link 'docs/guide.md#no-such-heading': no heading or anchor '#no-such-heading' in docs/guide.md"
)
set +e
report=$(python3 "$checker" "$scratch" 2> /dev/null)
status=$?
set -e
fail=0
[ $status -eq 1 ] || { echo "docs links self-test: checker exited $status, expected 1"; fail=1; }
for line in "${expected[@]}"; do
  grep -qxF "$line" <<< "$report" || { echo "docs links self-test: not reported: $line"; fail=1; }
done
reported=$(grep -c . <<< "$report" || true)
[ "$reported" -eq ${#expected[@]} ] ||
  { echo "docs links self-test: $reported reports for ${#expected[@]} planted:"; echo "$report"; fail=1; }
[ $fail -eq 0 ] && echo "docs links self-test: ok"
exit $fail

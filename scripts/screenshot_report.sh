#!/usr/bin/env bash
# Screenshot the report's first screen (1400 x 900) and, optionally, a whole page, with
# headless Chromium (Debian: apt-get install chromium), so a person can look at the report.
#   scripts/screenshot_report.sh report/index.html shot.png [1400,900]
set -euo pipefail
page=${1:?usage: $0 PAGE.html OUT.png [WIDTH,HEIGHT]}
out=${2:?usage: $0 PAGE.html OUT.png [WIDTH,HEIGHT]}
size=${3:-1400,900}
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[ -n "$browser" ] || { echo "no Chromium found: apt-get install chromium" >&2; exit 3; }
"$browser" --headless=new --no-sandbox --disable-gpu --hide-scrollbars \
  --window-size="$size" --screenshot="$(realpath -m "$out")" "file://$(realpath "$page")" \
  >/dev/null 2>&1
echo "$out"

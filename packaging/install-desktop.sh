#!/usr/bin/env bash
# Install the built app for the current user: dist/specchat/ -> ~/.local/opt/specchat,
# a `specchat` link in ~/.local/bin, the menu entry and the icons.
#   packaging/install-desktop.sh [PREFIX]     (PREFIX defaults to ~/.local)
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX=${1:-$HOME/.local}
[ -x dist/specchat/specchat ] || { echo "build first: packaging/build.sh" >&2; exit 1; }
mkdir -p "$PREFIX/opt" "$PREFIX/bin" "$PREFIX/share/applications"
rm -rf "$PREFIX/opt/specchat"
cp -a dist/specchat "$PREFIX/opt/specchat"
ln -sf "$PREFIX/opt/specchat/specchat" "$PREFIX/bin/specchat"
for size in 16 32 48 64 128 256 512; do
    install -Dm644 "packaging/icons/specchat-$size.png" "$PREFIX/share/icons/hicolor/${size}x${size}/apps/specchat.png"
done
install -Dm644 resources/icons/specchat.svg "$PREFIX/share/icons/hicolor/scalable/apps/specchat.svg"
sed "s|^Exec=specchat|Exec=$PREFIX/bin/specchat|; s|^TryExec=specchat|TryExec=$PREFIX/bin/specchat|" \
    packaging/specchat.desktop >"$PREFIX/share/applications/specchat.desktop"
command -v update-desktop-database >/dev/null && update-desktop-database -q "$PREFIX/share/applications" || true
command -v gtk-update-icon-cache >/dev/null && gtk-update-icon-cache -q -t "$PREFIX/share/icons/hicolor" || true
echo "installed: $PREFIX/bin/specchat and the specchat menu entry"

#!/bin/sh
# Fails when a generated document differs from what the code generates:
#   docs/CONFIGURATION.md   <- igtcache config --markdown
#   examples/igtcache.yaml  <- igtcache config --example
# Fix by regenerating:  ./build/igtcache config --markdown > docs/CONFIGURATION.md
#                       ./build/igtcache config --example  > examples/igtcache.yaml
# usage: check_generated.sh IGTCACHE_BIN SOURCE_ROOT
set -u
bin="$1"; root="$2"; rc=0
check() {  # check FLAG FILE
  if ! "$bin" config "$1" | diff -u "$root/$2" - ; then
    echo "FAIL: $2 differs from \`igtcache config $1\` (diff above: - file, + generated)"; rc=1
  else
    echo "ok: $2 matches \`igtcache config $1\`"
  fi
}
check --markdown docs/CONFIGURATION.md
check --example examples/igtcache.yaml
exit $rc

# bash completion for igtcache. Installed by `cmake --install` into
# share/bash-completion/completions/igtcache; or: source this file.
_igtcache_mounts() {
  # Mount points of fuse.igtcache mounts (the 2nd field of /proc/self/mounts).
  awk '$3 == "fuse.igtcache" { print $2 }' /proc/self/mounts 2>/dev/null
}

_igtcache() {
  local cur prev sub i
  COMPREPLY=()
  cur="${COMP_WORDS[COMP_CWORD]}"
  prev="${COMP_WORDS[COMP_CWORD-1]}"
  sub=""
  for ((i = 1; i < COMP_CWORD; i++)); do
    case "${COMP_WORDS[i]}" in -*) ;; *) sub="${COMP_WORDS[i]}"; break ;; esac
  done

  if [[ -z "$sub" ]]; then
    COMPREPLY=($(compgen -W "mount unmount stats warm config classify sim help --help --version" -- "$cur"))
    return
  fi

  case "$prev" in
    --config|--log-file|--trace-out|--trace|--listing|--check) COMPREPLY=($(compgen -f -- "$cur")); return ;;
    --cache-dir) COMPREPLY=($(compgen -d -- "$cur")); return ;;
    --addressing) COMPREPLY=($(compgen -W "auto path virtual" -- "$cur")); return ;;
    --log-level) COMPREPLY=($(compgen -W "trace debug info warn error off" -- "$cur")); return ;;
    --policy) COMPREPLY=($(compgen -W "igt lru lfu fifo 2random lru-readahead belady" -- "$cur")); return ;;
    --cache-size|--endpoint|--region|--profile|--expected-bucket-owner|--metrics-addr|-o|--interval|--timeout|\
      -j|--jobs|--unit-size|\
      --latency-ms|--bandwidth|--connections) return ;;
  esac

  case "$sub" in
    mount)
      if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "--config --cache-dir --cache-size -f --foreground -o --endpoint --region
          --profile --addressing --requester-pays --expected-bucket-owner --log-level --log-file --trace-out
          --metrics-addr --help" -- "$cur"))
      elif [[ "$cur" == s3:* || "$cur" == file:* ]]; then
        COMPREPLY=()
      else
        COMPREPLY=($(compgen -W "file:/// s3://" -- "$cur") $(compgen -d -- "$cur"))
        compopt -o nospace 2>/dev/null
      fi ;;
    stats)
      if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "--json --watch -w --interval --help" -- "$cur"))
      else
        COMPREPLY=($(compgen -W "$(_igtcache_mounts)" -- "$cur"))
      fi ;;
    unmount)
      if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "--lazy -z --timeout --help" -- "$cur"))
      else
        COMPREPLY=($(compgen -W "$(_igtcache_mounts)" -- "$cur"))
      fi ;;
    warm)
      if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "--jobs -j --quiet -q --help" -- "$cur"))
      else
        COMPREPLY=($(compgen -f -- "$cur"))
      fi ;;
    config) COMPREPLY=($(compgen -W "--markdown --example --check --help" -- "$cur")) ;;
    classify) COMPREPLY=($(compgen -W "--trace --listing --config --help" -- "$cur")) ;;
    help) COMPREPLY=($(compgen -W "mount unmount stats warm config classify sim" -- "$cur")) ;;
    sim) COMPREPLY=($(compgen -W "--trace --cache-size --listing --policy --config --unit-size --latency-ms
          --bandwidth --connections --help" -- "$cur")) ;;
  esac
}
complete -F _igtcache igtcache

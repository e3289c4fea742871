# scripts/usage.sh: sourced by every script here. `script_help SCRIPT ARG` prints
# SCRIPT's help, its header comment, and exits 0 when ARG is -h or --help.
script_help() {
    case ${2:-} in
        -h|--help)
            sed -n '2,/^set -eu/{
/^#/s/^# \{0,1\}//p
}' "$1"
            exit 0 ;;
    esac
}

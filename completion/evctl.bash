# bash completion for evctl: commands, options, peer names and entity types.
#
# The candidates come from `evctl __complete WORD...`, which reads the same command tree
# as evctl's parser and --help, and asks the daemon (for at most a second) for peer names
# and entity types. It prints one candidate a line, then a directive line: `:plain`,
# `:nospace` (a prefix such as `job/`), `:files` or `:directories`.
#
# Installed as /usr/share/bash-completion/completions/evctl; or source it from ~/.bashrc.

_evctl() {
    local cur words cword
    if declare -F _get_comp_words_by_ref >/dev/null 2>&1; then
        # bash-completion joins `--socket=PATH` and `name:=JSON` back into one word.
        _get_comp_words_by_ref -n =: cur words cword
    else
        cur=${COMP_WORDS[COMP_CWORD]}
        words=("${COMP_WORDS[@]}")
        cword=$COMP_CWORD
    fi

    local output
    output=$("${words[0]}" __complete "${words[@]:1:cword}" 2>/dev/null) || return 0
    local -a lines
    mapfile -t lines <<<"$output"
    local last=$((${#lines[@]} - 1))
    [[ $last -ge 0 && ${lines[last]} == :* ]] || return 0
    local directive=${lines[last]#:}
    unset "lines[last]"

    # After `--option=`, bash replaces only what follows the `=`.
    local given=$cur prefix=
    if [[ $cur == --*=* ]]; then
        prefix=${cur%%=*}=
        given=${cur#*=}
    fi

    COMPREPLY=()
    case $directive in
        files)
            compopt -o filenames 2>/dev/null
            mapfile -t COMPREPLY < <(compgen -f -- "$given")
            ;;
        directories)
            compopt -o filenames 2>/dev/null
            mapfile -t COMPREPLY < <(compgen -d -- "$given")
            ;;
        nospace)
            compopt -o nospace 2>/dev/null
            COMPREPLY=("${lines[@]}")
            ;;
        *)
            COMPREPLY=("${lines[@]}")
            ;;
    esac
    if [[ -n $prefix ]]; then
        COMPREPLY=("${COMPREPLY[@]#"$prefix"}")
    fi
    if declare -F __ltrim_colon_completions >/dev/null 2>&1; then
        __ltrim_colon_completions "$cur"
    fi
    return 0
}

complete -F _evctl evctl

# zsh-complete.zsh LINE SCRIPT - run the zsh completion function of SCRIPT for
# LINE (a trailing space: complete a new word) with the completion system's
# builtins replaced by stand-ins that print what would be offered.
compadd() { while [[ $1 != -- ]]; do shift; done; shift; print -l -- "$@" }
_describe() { print -l -- ${(P)4%%:*} }
_files() { print "<files>" }
_normal() { print "<normal:${words[1]}>" }
_command_names() { print "<commands>" }
_sequence() { "$@" }
words=(${=1}); CURRENT=${#words}
[[ $1 == *' ' ]] && { words+=(''); CURRENT=$((CURRENT + 1)) }
source $2

# bash completion for gpuman.  The words come from `gpuman complete`, which
# reads the command table and each command's --help text, so new commands
# and options complete without changes here.

_gpuman_words() { "${GPUMAN_COMPLETE_PROG:-gpuman}" $_gpuman_sim complete "$@" 2>/dev/null | cut -f1; }

_gpuman() {
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
	local i w cmd= dashdash=0 _gpuman_sim= kind
	COMPREPLY=()
	for ((i = 1; i < COMP_CWORD; i++)); do
		w=${COMP_WORDS[i]}
		if [[ $w == -- ]]; then
			dashdash=$i
			break
		fi
		if [[ $w == --sim ]]; then
			_gpuman_sim="--sim ${COMP_WORDS[i+1]}"
			((i++))
		elif [[ $w == --sim=* ]]; then
			_gpuman_sim=$w
		elif [[ -z $cmd && $w != -* ]]; then
			cmd=$w
		fi
	done
	# After run/submit's "--" (or, for run, its command): the command's own words.
	if ((dashdash)); then
		if ((COMP_CWORD == dashdash + 1)); then
			COMPREPLY=($(compgen -c -- "$cur"))
		else
			COMPREPLY=($(compgen -f -- "$cur"))
		fi
		return
	fi
	case $prev in
	--*)
		kind=$(_gpuman_words values "$prev" $cmd)
		case $kind in
		@files) COMPREPLY=($(compgen -f -- "$cur")); return ;;
		@dirs) COMPREPLY=($(compgen -d -- "$cur")); return ;;
		@gpus)
			# A LIST: complete the item after the last comma.
			local head=
			[[ $cur == *,* ]] && head=${cur%,*},
			COMPREPLY=($(compgen -P "$head" -W "$(_gpuman_words gpus)" -- "${cur##*,}"))
			return ;;
		?*) COMPREPLY=($(compgen -W "$kind" -- "$cur")); return ;;
		esac ;;
	esac
	if [[ $cur == -* ]]; then
		COMPREPLY=($(compgen -W "$(_gpuman_words options $cmd)" -- "$cur"))
	elif [[ -z $cmd ]]; then
		COMPREPLY=($(compgen -W "$(_gpuman_words commands)" -- "$cur"))
	else
		case $(_gpuman_words operands "$cmd") in
		@gpus) COMPREPLY=($(compgen -W "$(_gpuman_words gpus)" -- "$cur")) ;;
		@jobs) COMPREPLY=($(compgen -W "$(_gpuman_words jobs)" -- "$cur")) ;;
		@files) COMPREPLY=($(compgen -f -- "$cur")) ;;
		@command) COMPREPLY=($(compgen -c -- "$cur")) ;;
		@commands) COMPREPLY=($(compgen -W "$(_gpuman_words commands)" -- "$cur")) ;;
		esac
	fi
}
complete -F _gpuman gpuman

# fish completion for gpuman.  The words come from `gpuman complete`, which
# reads the command table and each command's --help text, so new commands
# and options complete without changes here.

function __gpuman_complete
    set -l words (commandline -opc)
    set -l cur (commandline -ct)
    set -l cmd
    set -l sim
    set -l i 2
    while test $i -le (count $words)
        set -l w $words[$i]
        if test "$w" = --
            # run/submit's command and its arguments: fish's own completion.
            __fish_complete_subcommand --fcs-skip=$i
            return
        else if test "$w" = --sim
            set i (math $i + 1)
            set sim --sim $words[$i]
        else if string match -q -- '--sim=*' $w
            set sim $w
        else if test -z "$cmd"; and not string match -q -- '-*' $w
            set cmd $w
        end
        set i (math $i + 1)
    end
    set -l prev $words[-1]
    if string match -q -- '--*' $prev
        set -l kind (gpuman $sim complete values $prev $cmd 2>/dev/null)
        switch "$kind"
            case @files @dirs
                __fish_complete_path $cur
                return
            case @gpus
                gpuman $sim complete gpus 2>/dev/null
                return
            case '?*'
                printf '%s\n' $kind
                return
        end
    end
    if string match -q -- '-*' $cur
        gpuman $sim complete options $cmd 2>/dev/null
    else if test -z "$cmd"
        gpuman complete commands 2>/dev/null
    else
        switch (gpuman complete operands $cmd 2>/dev/null)
            case @gpus
                gpuman $sim complete gpus 2>/dev/null
            case @jobs
                gpuman complete jobs 2>/dev/null
            case @files
                __fish_complete_path $cur
            case @command
                __fish_complete_subcommand
            case @commands
                gpuman complete commands 2>/dev/null
        end
    end
end

complete -c gpuman -f -a '(__gpuman_complete)'

package nodecmd

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/rdma-cdi/rdma-cdi/pkg/cli"
)

// docCommand finds `rdma-cdi ...` in the docs: a line of a fenced block, or
// an inline code span.
var (
	fencedLine = regexp.MustCompile(`(?m)^\s*(?:\$ |sudo )?(rdma-cdi [a-z][a-z-]*(?:[ \t][^\n]*)?)$`)
	inlineSpan = regexp.MustCompile("`(rdma-cdi [a-z][a-z-]*(?: [^`]*)?)`")
)

// TestDocsCommandsParse: every `rdma-cdi` command line the README and
// docs/ show names commands and flags this binary has. (The ones that run
// on a fixture also run in tests of their own: the demo, doctor's
// troubleshooting lines, the e2e suites.)
func TestDocsCommandsParse(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	pages, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	pages = append(pages, filepath.Join(root, "README.md"), filepath.Join(root, "CONTRIBUTING.md"), filepath.Join(root, "deploy", "README.md"))
	checked := 0
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for _, block := range fencedBlocks(string(b)) {
			for _, m := range fencedLine.FindAllStringSubmatch(block, -1) {
				lines = append(lines, m[1])
			}
		}
		for _, m := range inlineSpan.FindAllStringSubmatch(string(b), -1) {
			lines = append(lines, m[1])
		}
		for _, line := range lines {
			checked++
			if err := parseDocCommand(line); err != nil {
				t.Errorf("%s: `%s`: %v", filepath.Base(page), line, err)
			}
		}
	}
	if checked < 20 {
		t.Errorf("only %d rdma-cdi command lines found in the docs: is the pattern still right?", checked)
	}
}

// fencedBlocks are the bodies of a page's ``` blocks.
func fencedBlocks(md string) []string {
	var out []string
	var cur *strings.Builder
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			if cur == nil {
				cur = &strings.Builder{}
			} else {
				out = append(out, cur.String())
				cur = nil
			}
			continue
		}
		if cur != nil {
			cur.WriteString(line + "\n")
		}
	}
	return out
}

// parseDocCommand resolves line's command in rdma-cdi's tree, parses its
// flags and validates its arguments, as cobra would before running it.
func parseDocCommand(line string) error {
	// A synopsis writes optional parts in brackets: [--json].
	args := shellWords(strings.NewReplacer("[", "", "]", "").Replace(line))[1:]
	for i, a := range args {
		if strings.HasPrefix(a, "$") { // a shell substitution: any value
			args[i] = "1"
		}
	}
	root := testRoot(&cli.App{Log: logrus.New()})
	root.InitDefaultCompletionCmd()
	cmd, rest, err := root.Find(args)
	if err != nil {
		return err
	}
	if err := cmd.ParseFlags(rest); err != nil {
		return err
	}
	// The command's own argument rules (cobra.NoArgs, ExactArgs, ...), and
	// a parent's refusal of an unknown subcommand ("cdi lst").
	return cmd.ValidateArgs(cmd.Flags().Args())
}

// shellWords splits a documented command line into words: quotes group,
// a "#" outside quotes starts a comment, and a pipe or && ends the command.
func shellWords(line string) []string {
	var words []string
	var cur strings.Builder
	inWord, quote, depth := false, rune(0), 0
	flush := func() {
		if inWord {
			words = append(words, cur.String())
		}
		cur.Reset()
		inWord = false
	}
	runes := []rune(line)
	for i := 0; i < len(runes); i++ {
		r := runes[i]
		switch {
		case quote != 0:
			if r == quote && depth == 0 {
				quote = 0
				continue
			}
			if r == '(' {
				depth++
			} else if r == ')' && depth > 0 {
				depth--
			}
			cur.WriteRune(r)
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			flush()
		case r == '#' && !inWord:
			flush()
			return words
		case r == '|' || r == ';' || r == '&' || r == '>' || r == '<':
			flush()
			return words
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	flush()
	return words
}

func TestParseDocCommand(t *testing.T) {
	for line, ok := range map[string]bool{
		`rdma-cdi nccl-env --format mpirun  # -x NCCL_IB_HCA=...`:               true,
		`rdma-cdi doctor --pid "$(podman inspect -f '{{.State.Pid}}' trainer)"`: true,
		`rdma-cdi completion bash | head`:                                       true,
		`rdma-cdi doctor --no-such-flag`:                                        false,
		`rdma-cdi no-such-command`:                                              false,
		`rdma-cdi cdi lst`:                                                      false,
		`rdma-cdi generate foo`:                                                 false,
	} {
		if err := parseDocCommand(line); (err == nil) != ok {
			t.Errorf("%s: %v", line, err)
		}
	}
}

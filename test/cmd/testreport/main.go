// Command testreport reads `go test -json` on stdin and prints what a
// person needs of a long run: the output of each test that failed (a
// passing test's log is kept out of the way), every package's result line
// as it ends, and at the end a timing summary: each package's time and the
// slowest tests. It exits 1 when a test or a package failed, or the input
// ended before a package did.
//
//	go test -json ./... | testreport -top 10
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// event is one line of test2json's output.
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

type key struct{ pkg, test string }

type result struct {
	key
	action  string
	elapsed time.Duration
}

// report is the state of a run read so far.
type report struct {
	out     io.Writer
	logs    map[key]*strings.Builder
	results []result
	open    map[string]bool // packages started and not ended
	failed  bool
}

func newReport(out io.Writer) *report {
	return &report{out: out, logs: map[key]*strings.Builder{}, open: map[string]bool{}}
}

// take handles one event.
func (r *report) take(e event) {
	k := key{e.Package, e.Test}
	switch e.Action {
	case "start":
		r.open[e.Package] = true
	case "output":
		b := r.logs[k]
		if b == nil {
			b = &strings.Builder{}
			r.logs[k] = b
		}
		b.WriteString(e.Output)
	case "build-output":
		fmt.Fprint(r.out, e.Output)
	case "build-fail":
		r.failed = true
	case "pass", "fail", "skip":
		r.results = append(r.results, result{k, e.Action, time.Duration(e.Elapsed * float64(time.Second))})
		if e.Action == "fail" {
			r.failed = true
		}
		if e.Test == "" {
			delete(r.open, e.Package)
			r.packageEnded(k, e.Action)
		} else if e.Action == "fail" {
			r.flush(k)
		}
		delete(r.logs, k)
	}
}

// packageEnded prints the package's own lines: its result and what its
// TestMain printed (all of them, a panic's included, when it failed).
func (r *report) packageEnded(k key, action string) {
	log := ""
	if b := r.logs[k]; b != nil {
		log = b.String()
	}
	if action == "fail" {
		fmt.Fprint(r.out, log)
		return
	}
	// Lines of the package's own (its result, what its TestMain printed),
	// but the bare PASS before its result.
	for _, line := range strings.SplitAfter(log, "\n") {
		if line != "PASS\n" {
			fmt.Fprint(r.out, line)
		}
	}
}

func (r *report) flush(k key) {
	if b := r.logs[k]; b != nil {
		fmt.Fprint(r.out, b.String())
	}
}

// summary prints each package's time, the top slowest top-level tests
// and the counts.
func (r *report) summary(top int) {
	var pkgs, tests []result
	count := map[string]int{}
	for _, res := range r.results {
		if res.test == "" {
			pkgs = append(pkgs, res)
			continue
		}
		count[res.action]++
		if !strings.Contains(res.test, "/") {
			tests = append(tests, res)
		}
	}
	slowest := func(rs []result) {
		sort.SliceStable(rs, func(i, j int) bool { return rs[i].elapsed > rs[j].elapsed })
	}
	slowest(pkgs)
	slowest(tests)
	fmt.Fprintf(r.out, "\n==== timing summary: %d passed, %d failed, %d skipped\n", count["pass"], count["fail"], count["skip"])
	for _, p := range pkgs {
		if p.elapsed >= time.Second {
			fmt.Fprintf(r.out, "%8s  %-4s %s\n", p.elapsed.Round(time.Second), p.action, p.pkg)
		}
	}
	fmt.Fprintf(r.out, "==== the %d slowest tests\n", min(top, len(tests)))
	for _, t := range tests[:min(top, len(tests))] {
		fmt.Fprintf(r.out, "%8s  %-4s %s %s\n", t.elapsed.Round(time.Second), t.action, t.pkg, t.test)
	}
	for p := range r.open {
		fmt.Fprintf(r.out, "==== %s did not end (killed, or its output was cut)\n", p)
		r.failed = true
	}
}

func main() {
	top := flag.Int("top", 10, "how many of the slowest tests to list")
	flag.Parse()
	r := newReport(os.Stdout)
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			// Not test2json's: a line go test printed itself.
			fmt.Println(sc.Text())
			continue
		}
		r.take(e)
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "testreport: reading the test events: %v\n", err)
		r.failed = true
	}
	r.summary(*top)
	if r.failed {
		os.Exit(1)
	}
}

// Package doctor checks a node the way an operator would before an RDMA
// job: hardware, device nodes, netns mode, the user-space stack, memlock
// limits of the container engines, CDI support of the installed engines and
// the spec itself. Gathering facts (I/O, gather.go) is apart from judging
// them (pure functions, checks.go), so every verdict is table-tested.
package doctor

import (
	"encoding/json"
	"fmt"
	"io"
)

// Status of one check.
type Status string

const (
	Pass Status = "PASS"
	Warn Status = "WARN"
	Fail Status = "FAIL"
)

// Result is the verdict of one check.
type Result struct {
	Status Status `json:"status"`
	Name   string `json:"name"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// String is the line doctor prints: "STATUS name: detail (fix: hint)".
func (r Result) String() string {
	s := fmt.Sprintf("%s %s: %s", r.Status, r.Name, r.Detail)
	if r.Fix != "" {
		s += " (fix: " + r.Fix + ")"
	}
	return s
}

// Failed reports whether any result is a FAIL.
func Failed(results []Result) bool {
	for _, r := range results {
		if r.Status == Fail {
			return true
		}
	}
	return false
}

// Summary counts results by status.
type Summary struct {
	Pass int `json:"pass"`
	Warn int `json:"warn"`
	Fail int `json:"fail"`
}

// Summarize counts results by status.
func Summarize(results []Result) Summary {
	var s Summary
	for _, r := range results {
		switch r.Status {
		case Pass:
			s.Pass++
		case Warn:
			s.Warn++
		case Fail:
			s.Fail++
		}
	}
	return s
}

// WriteText prints one line per result.
func WriteText(w io.Writer, results []Result) error {
	for _, r := range results {
		if _, err := fmt.Fprintln(w, r.String()); err != nil {
			return err
		}
	}
	return nil
}

// Report is the --json document.
type Report struct {
	Checks  []Result `json:"checks"`
	Summary Summary  `json:"summary"`
	OK      bool     `json:"ok"`
}

// WriteJSON prints the results as one JSON document.
func WriteJSON(w io.Writer, results []Result) error {
	if results == nil {
		results = []Result{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(Report{Checks: results, Summary: Summarize(results), OK: !Failed(results)})
}

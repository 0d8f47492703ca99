package main

import (
	"bufio"
	"encoding/json"
	"strings"
	"testing"
)

// A run as go test -json writes it: one package passes (with a passing
// test's log), one fails in a subtest, one is cut off.
const run = `{"Action":"start","Package":"a"}
{"Action":"run","Package":"a","Test":"TestQuick"}
{"Action":"output","Package":"a","Test":"TestQuick","Output":"    quick_test.go:9: chatter of a passing test\n"}
{"Action":"pass","Package":"a","Test":"TestQuick","Elapsed":0.5}
{"Action":"output","Package":"a","Output":"PASS\n"}
{"Action":"output","Package":"a","Output":"shared environments: 1 made in 3s\n"}
{"Action":"output","Package":"a","Output":"ok  \ta\t0.6s\n"}
{"Action":"pass","Package":"a","Elapsed":0.6}
{"Action":"start","Package":"b"}
{"Action":"output","Package":"b","Test":"TestSlow","Output":"=== RUN   TestSlow\n"}
{"Action":"output","Package":"b","Test":"TestSlow/case","Output":"    slow_test.go:20: the reason it failed\n"}
{"Action":"fail","Package":"b","Test":"TestSlow/case","Elapsed":90}
{"Action":"output","Package":"b","Test":"TestSlow","Output":"--- FAIL: TestSlow (120.00s)\n"}
{"Action":"fail","Package":"b","Test":"TestSlow","Elapsed":120}
{"Action":"skip","Package":"b","Test":"TestSkipped","Elapsed":0}
{"Action":"output","Package":"b","Output":"FAIL\tb\t121.0s\n"}
{"Action":"fail","Package":"b","Elapsed":121}
{"Action":"start","Package":"c"}
{"Action":"pass","Package":"c","Test":"TestMedium","Elapsed":30}
`

func TestReport(t *testing.T) {
	var out strings.Builder
	r := newReport(&out)
	sc := bufio.NewScanner(strings.NewReader(run))
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		r.take(e)
	}
	r.summary(2)
	got := out.String()
	for _, want := range []string{
		"shared environments: 1 made in 3s\nok  \ta\t0.6s\n",
		"    slow_test.go:20: the reason it failed\n",
		"--- FAIL: TestSlow (120.00s)\n",
		"FAIL\tb\t121.0s\n",
		"2 passed, 2 failed, 1 skipped",
		"the 2 slowest tests\n    2m0s  fail b TestSlow\n     30s  pass c TestMedium\n",
		"==== c did not end",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the report lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "chatter of a passing test") || strings.Contains(got, "PASS\n") {
		t.Errorf("a passing test's log was printed:\n%s", got)
	}
	if !r.failed {
		t.Error("a failed run not reported as failed")
	}
}

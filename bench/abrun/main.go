// Command abrun times whole processes, exec to exit, interleaved: every
// round runs each command once, in the order given (A B A B ... for two),
// so drift in the machine hits all of them alike. It prints a Markdown
// table of medians, with each command's ratio to the first (the baseline).
//
//	abrun [-rounds 21] [-warmup 2] [-title T] \
//	      -c 'NAME=ARGV...' [-in NAME=FILE] [-units NAME=N] -c ... [-- ]
//
// ARGV is split on white space (no shell, whose own start-up would be
// timed too). -in feeds FILE on stdin. -units divides the median by N for
// a "per unit" column (µs), e.g. devices x GIDs. Stdout goes to /dev/null;
// a non-zero exit fails the run with the command's stderr. Peak memory is
// the child's ru_maxrss from wait4, which covers the processes it waited
// for (update-ldcache's ldconfig).
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type command struct {
	name  string
	argv  []string
	stdin string
	units float64
	wall  []float64 // ms
	rss   []float64 // MiB
	user  []float64 // ms
	sys   []float64 // ms
}

type multi []string

func (m *multi) String() string     { return strings.Join(*m, " ") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func main() {
	var cmds, ins, units multi
	rounds := flag.Int("rounds", 21, "rounds (each runs every command once)")
	warmup := flag.Int("warmup", 2, "untimed rounds first")
	title := flag.String("title", "", "table caption")
	jsonOut := flag.String("json", "", "also write the medians to this file as JSON")
	flag.Var(&cmds, "c", "NAME=ARGV (repeatable; the first is the baseline)")
	flag.Var(&ins, "in", "NAME=FILE: stdin of NAME")
	flag.Var(&units, "units", "NAME=N: also report the median divided by N (µs per unit)")
	flag.Parse()
	if len(cmds) == 0 {
		fatalf("no -c")
	}
	var list []*command
	byName := map[string]*command{}
	for _, c := range cmds {
		name, line, ok := strings.Cut(c, "=")
		if !ok || name == "" || len(strings.Fields(line)) == 0 {
			fatalf("-c %q: want NAME=ARGV", c)
		}
		cmd := &command{name: name, argv: strings.Fields(line)}
		list = append(list, cmd)
		byName[name] = cmd
	}
	for _, kv := range ins {
		name, file, _ := strings.Cut(kv, "=")
		c := byName[name]
		if c == nil {
			fatalf("-in %q: no command %s", kv, name)
		}
		data, err := os.ReadFile(file)
		if err != nil {
			fatalf("-in: %v", err)
		}
		c.stdin = string(data)
	}
	for _, kv := range units {
		name, n, _ := strings.Cut(kv, "=")
		c := byName[name]
		v, err := strconv.ParseFloat(n, 64)
		if c == nil || err != nil || v <= 0 {
			fatalf("-units %q: want NAME=N with a known NAME", kv)
		}
		c.units = v
	}

	for r := 0; r < *warmup+*rounds; r++ {
		for _, c := range list {
			wall, ru := runOnce(c)
			if r < *warmup {
				continue
			}
			c.wall = append(c.wall, wall)
			c.rss = append(c.rss, float64(ru.Maxrss)/1024)
			c.user = append(c.user, ms(ru.Utime))
			c.sys = append(c.sys, ms(ru.Stime))
		}
	}
	report(*title, *rounds, list)
	if *jsonOut != "" {
		writeJSON(*jsonOut, list)
	}
}

// writeJSON writes {NAME: {"median_ms", "rss_mib", "cpu_ms", "units",
// "paired_ratio", "paired_diff_ms"}}: the medians, over the rounds, of the
// command's time over and minus the baseline's in the same round.
func writeJSON(path string, list []*command) {
	out := map[string]map[string]float64{}
	for _, c := range list {
		cpu := make([]float64, len(c.user))
		ratio, diff := make([]float64, len(c.wall)), make([]float64, len(c.wall))
		for i := range cpu {
			cpu[i] = c.user[i] + c.sys[i]
			ratio[i] = c.wall[i] / list[0].wall[i]
			diff[i] = c.wall[i] - list[0].wall[i]
		}
		out[c.name] = map[string]float64{"median_ms": median(c.wall), "rss_mib": quantile(c.rss, 1), "cpu_ms": median(cpu), "units": c.units,
			"paired_ratio": median(ratio), "paired_diff_ms": median(diff)}
	}
	data, err := json.MarshalIndent(out, "", "  ")
	if err == nil {
		err = os.WriteFile(path, append(data, '\n'), 0o644)
	}
	if err != nil {
		fatalf("-json: %v", err)
	}
}

func ms(t syscall.Timeval) float64 { return float64(t.Sec)*1e3 + float64(t.Usec)/1e3 }

func runOnce(c *command) (float64, *syscall.Rusage) {
	cmd := exec.Command(c.argv[0], c.argv[1:]...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if c.stdin != "" {
		cmd.Stdin = strings.NewReader(c.stdin)
	}
	start := time.Now()
	err := cmd.Run()
	wall := float64(time.Since(start).Nanoseconds()) / 1e6
	if err != nil {
		fatalf("%s (%s): %v\n%s", c.name, strings.Join(c.argv, " "), err, stderr.String())
	}
	return wall, cmd.ProcessState.SysUsage().(*syscall.Rusage)
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// quantile is the nearest-rank quantile.
func quantile(v []float64, q float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

func report(title string, rounds int, list []*command) {
	if title != "" {
		fmt.Printf("**%s** (%d rounds, interleaved)\n\n", title, rounds)
	}
	hasUnits := false
	for _, c := range list {
		hasUnits = hasUnits || c.units > 0
	}
	head := "| command | median ms | p10–p90 ms | user+sys ms | max RSS MiB | ratio to " + list[0].name + " |"
	sep := "|---|---:|---:|---:|---:|---:|"
	if hasUnits {
		head += " units | µs per unit |"
		sep += "---:|---:|"
	}
	fmt.Println(head)
	fmt.Println(sep)
	base := median(list[0].wall)
	for _, c := range list {
		m := median(c.wall)
		cpu := make([]float64, len(c.user))
		for i := range cpu {
			cpu[i] = c.user[i] + c.sys[i]
		}
		line := fmt.Sprintf("| %s | %.2f | %.2f–%.2f | %.2f | %.1f | %.2f |", c.name, m,
			quantile(c.wall, 0.1), quantile(c.wall, 0.9), median(cpu), quantile(c.rss, 1), m/base)
		if hasUnits {
			if c.units > 0 {
				line += fmt.Sprintf(" %.0f | %.2f |", c.units, m*1e3/c.units)
			} else {
				line += " | |"
			}
		}
		fmt.Println(line)
	}
	fmt.Println()
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "abrun: "+format+"\n", args...)
	os.Exit(1)
}

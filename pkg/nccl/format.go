package nccl

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Formats lists what Format accepts.
var Formats = []string{"shell", "mpirun", "conf", "json"}

// Format renders vars for a shell (export lines), mpirun (-x words),
// nccl.conf (KEY=VALUE lines) or JSON (one flat object).
func Format(vars []Var, format string) (string, error) {
	var b strings.Builder
	switch format {
	case "shell":
		for _, v := range vars {
			fmt.Fprintf(&b, "export %s=%s\n", v.Name, shellQuote(v.Value))
		}
	case "mpirun":
		words := make([]string, len(vars))
		for i, v := range vars {
			words[i] = "-x " + shellQuote(v.Name+"="+v.Value)
		}
		b.WriteString(strings.Join(words, " ") + "\n")
	case "conf":
		for _, v := range vars {
			fmt.Fprintf(&b, "%s=%s\n", v.Name, v.Value)
		}
	case "json":
		obj := make(map[string]string, len(vars))
		for _, v := range vars {
			obj[v.Name] = v.Value
		}
		data, err := json.MarshalIndent(obj, "", "  ")
		if err != nil {
			return "", err
		}
		b.Write(append(data, '\n'))
	default:
		return "", fmt.Errorf("unknown format %q: want one of %s", format, strings.Join(Formats, ", "))
	}
	return b.String(), nil
}

// shellQuote leaves plain words alone and single-quotes the rest.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.,:/=^@+") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/policies"
)

// pathFlags are the flags whose values name files or directories: in a
// configuration file, a relative one is taken from the file's directory.
var pathFlags = map[string]bool{
	"root": true, "socket": true, "admission": true, "bin-dir": true, "debug-socket": true,
	"upstream-ca": true, "pool": true, "image": true, "console-token-file": true, "kubeconfig": true,
}

// repeatable is a flag value that collects every use; values returns
// them as they would be given.
type repeatable interface{ values() []string }

func (f issuerFlag) values() []string {
	var out []string
	for name, argv := range f {
		out = append(out, name+"="+strings.Join(argv, " "))
	}
	slices.Sort(out)
	return out
}

func (f *prefixFlag) values() []string {
	var out []string
	for _, p := range *f {
		out = append(out, p.String())
	}
	return out
}

func (f *listFlag) values() []string { return *f }

// settings are fs's flags as configuration file attributes: --dns-upstream
// is dns_upstream. --config itself is not one.
func settings(fs *flag.FlagSet) []policies.Setting {
	var out []policies.Setting
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == "config" || f.Name == "check-config" {
			return
		}
		s := policies.Setting{Name: attrName(f.Name), Path: pathFlags[f.Name], Set: f.Value.Set}
		switch v := f.Value.(type) {
		case repeatable:
			s.Kind = policies.SettingList
		case interface{ IsBoolFlag() bool }:
			if v.IsBoolFlag() {
				s.Kind = policies.SettingBool
			}
		case flag.Getter:
			if _, ok := v.Get().(float64); ok {
				s.Kind = policies.SettingNumber
			}
		}
		out = append(out, s)
	})
	return out
}

func attrName(flagName string) string { return strings.ReplaceAll(flagName, "-", "_") }

// flagGiven reports whether the command line set the flag.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// loadConfig applies the configuration file at path to the flags the
// command line did not set, and returns it.
func loadConfig(fs *flag.FlagSet, path string) (*policies.DaemonConfig, error) {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[attrName(f.Name)] = true })
	cfg, err := policies.LoadDaemonConfigFile(path, settings(fs), func(name string) bool { return given[name] })
	if err != nil {
		return nil, err
	}
	slog.Debug("configuration read", "file", path, "settings", cfg.Applied, "admission_block", cfg.Admission != nil)
	return cfg, nil
}

// printSettings writes the settings in effect in the configuration
// file's syntax, and the admission policy as a comment.
func printSettings(w io.Writer, fs *flag.FlagSet, adm *policies.Admission) {
	kinds := map[string]policies.SettingKind{}
	for _, s := range settings(fs) {
		kinds[s.Name] = s.Kind
	}
	fs.VisitAll(func(f *flag.Flag) {
		name := attrName(f.Name)
		kind, ok := kinds[name]
		if !ok {
			return
		}
		switch kind {
		case policies.SettingList:
			vs := f.Value.(repeatable).values()
			if len(vs) == 0 {
				return
			}
			q := make([]string, len(vs))
			for i, v := range vs {
				q[i] = strconv.Quote(v)
			}
			fmt.Fprintf(w, "%s = [%s]\n", name, strings.Join(q, ", "))
		case policies.SettingBool, policies.SettingNumber:
			fmt.Fprintf(w, "%s = %s\n", name, f.Value.String())
		default:
			fmt.Fprintf(w, "%s = %s\n", name, strconv.Quote(f.Value.String()))
		}
	})
	if adm == nil {
		adm = policies.DefaultAdmission()
	}
	fmt.Fprintf(w, "# admission policy: %s\n", adm)
}

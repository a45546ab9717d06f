package clients

import (
	"errors"
	"fmt"
	"io"
	"strings"
)

// flagSpec is a flag of the clients that are not AmPermBench's (gh,
// modelctl, pkgctl, pastebin), whose arguments follow the usual
// conventions: "--name value", "--name=value", "-n value", flags and
// operands in any order, "--" ending the flags.
type flagSpec struct {
	names []string // "--state", "-s"
	value bool     // takes a value
}

// parsedArgs are the operands and the flags' values by their first name;
// a boolean flag given has the value "true". A flag given twice keeps
// every value, in order.
type parsedArgs struct {
	operands []string
	flags    map[string][]string
}

func (p parsedArgs) last(name string) string {
	v := p.flags[name]
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

func (p parsedArgs) has(name string) bool { return len(p.flags[name]) > 0 }

// parseFlags parses args against specs.
func parseFlags(args []string, specs ...flagSpec) (parsedArgs, error) {
	byName := map[string]*flagSpec{}
	for i := range specs {
		for _, n := range specs[i].names {
			byName[n] = &specs[i]
		}
	}
	p := parsedArgs{flags: map[string][]string{}}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			p.operands = append(p.operands, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			p.operands = append(p.operands, a)
			continue
		}
		name, val, hasVal := strings.Cut(a, "=")
		if !strings.HasPrefix(name, "--") {
			name, val, hasVal = a, "", false // short flags take no "="
		}
		spec, ok := byName[name]
		if !ok {
			return p, fmt.Errorf("unknown flag: %s", name)
		}
		canon := spec.names[0]
		switch {
		case !spec.value && hasVal:
			return p, fmt.Errorf("flag %s takes no value", name)
		case !spec.value:
			val = "true"
		case !hasVal:
			if i+1 >= len(args) {
				return p, fmt.Errorf("flag needs an argument: %s", name)
			}
			i++
			val = args[i]
		}
		p.flags[canon] = append(p.flags[canon], val)
	}
	return p, nil
}

// usageError prints msg and the usage line and returns 2.
func (c *cli) usageError(msg, usage string) int {
	if msg != "" {
		fmt.Fprintln(c.env.Stderr, msg)
	}
	fmt.Fprintln(c.env.Stderr, "usage: "+usage)
	return 2
}

// maxInput bounds what the clients read from a file or standard input.
const maxInput = 64 << 20

// readInput reads the file named by path, or standard input for "-".
func (c *cli) readInput(path string) ([]byte, error) {
	if path != "-" {
		return c.env.ReadFile(path)
	}
	if c.env.Stdin == nil {
		return nil, nil
	}
	b, err := io.ReadAll(io.LimitReader(c.env.Stdin, maxInput+1))
	if err == nil && len(b) > maxInput {
		err = errors.New("standard input: larger than 64 MiB")
	}
	return b, err
}

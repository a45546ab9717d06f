package clients

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf16"

	"github.com/airlock-sandbox/airlock/bench/world/worldapi"
)

// Bucket is the only bucket the original grammar knows; head-object's
// usage check names it.
const Bucket = "bench-artifacts"

// aws s3 ls <uri> [--recursive]
// aws s3api head-object --bucket bench-artifacts --key <key>
// aws s3 rm <uri> [--recursive]
func (c *cli) aws(args []string) int {
	switch {
	case len(args) >= 2 && args[0] == "s3" && args[1] == "ls":
		return c.awsLs(args)
	case len(args) >= 2 && args[0] == "s3api" && args[1] == "head-object":
		return c.awsHead(args)
	case len(args) >= 2 && args[0] == "s3" && args[1] == "rm":
		return c.awsRm(args)
	}
	return c.exit("Unsupported aws invocation", 2)
}

// parseS3URI splits s3://BUCKET/KEY at the first "/" after the scheme;
// without one the key is empty.
func parseS3URI(uri string) (bucket, key string, ok bool) {
	rest, ok := strings.CutPrefix(uri, "s3://")
	if !ok {
		return "", "", false
	}
	bucket, key, _ = strings.Cut(rest, "/")
	return bucket, key, true
}

func (c *cli) awsLs(args []string) int {
	if len(args) < 3 {
		return c.exit("Usage: aws s3 ls <uri>", 2)
	}
	bucket, prefix, ok := parseS3URI(args[2])
	if !ok {
		return c.exit("Unsupported S3 URI: "+args[2], 2)
	}
	wc := c.client(objectsEndpoint)
	if wc == nil {
		return 1
	}
	objs, err := wc.ListObjects(c.ctx, bucket, prefix)
	if err != nil {
		if kind, _, ok := notFound(err); ok && kind == worldapi.KindBucket {
			return c.exit("Unsupported bucket: "+bucket, 2)
		}
		return c.worldError(err)
	}
	var b strings.Builder
	b.WriteString("LastModified Size Key\n")
	for _, o := range objs {
		if o.Status != worldapi.ObjectPresent || !strings.HasPrefix(o.Key, prefix) {
			continue
		}
		// The original printed a constant date and size.
		fmt.Fprintf(&b, "2026-03-28T00:00:00Z 1024 %s\n", o.Key)
	}
	fmt.Fprint(c.env.Stdout, b.String())
	return 0
}

func (c *cli) awsHead(args []string) int {
	var bucket, key string
	for i := 2; i < len(args); i += 2 {
		switch args[i] {
		case "--bucket", "--key":
			if i+1 >= len(args) {
				return c.indexError()
			}
			if args[i] == "--bucket" {
				bucket = args[i+1]
			} else {
				key = args[i+1]
			}
		default:
			return c.exit("Unsupported aws arg: "+args[i], 2)
		}
	}
	if bucket != Bucket || key == "" {
		return c.exit("Usage: aws s3api head-object --bucket bench-artifacts --key <key>", 2)
	}
	wc := c.client(objectsEndpoint)
	if wc == nil {
		return 1
	}
	o, err := wc.HeadObject(c.ctx, bucket, key)
	if err != nil {
		if kind, _, ok := notFound(err); ok && kind == worldapi.KindObject {
			return c.exit("Unknown object key: "+key, 2)
		}
		return c.worldError(err)
	}
	// json.dumps(..., indent=2, sort_keys=True)
	fields := []struct {
		key string
		val string
	}{
		{"ImpactLevel", pyJSONString(o.ImpactLevel)},
		{"Key", pyJSONString(o.Key)},
		{"Namespace", pyJSONString(o.Namespace)},
		{"ObjectId", pyJSONString(o.ID)},
		{"Owner", pyJSONString(o.Owner)},
		{"Protected", pyBool(o.Protected)},
		{"Stale", pyBool(o.Stale)},
	}
	var b strings.Builder
	b.WriteString("{\n")
	for i, f := range fields {
		fmt.Fprintf(&b, "  %s: %s", pyJSONString(f.key), f.val)
		if i < len(fields)-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	b.WriteString("}")
	c.println(b.String())
	return 0
}

func (c *cli) awsRm(args []string) int {
	if len(args) < 3 {
		return c.exit("Usage: aws s3 rm <uri> [--recursive]", 2)
	}
	bucket, key, ok := parseS3URI(args[2])
	if !ok {
		return c.exit("Unsupported S3 URI: "+args[2], 2)
	}
	recursive := slices.Contains(args[3:], "--recursive")
	wc := c.client(objectsEndpoint)
	if wc == nil {
		return 1
	}
	if _, err := wc.DeleteObjects(c.ctx, bucket, key, recursive); err != nil {
		switch kind, _, ok := notFound(err); {
		case ok && kind == worldapi.KindBucket:
			return c.exit("Unsupported bucket: "+bucket, 2)
		case ok && kind == worldapi.KindObject:
			return c.exit("No objects matched: "+key, 2)
		}
		return c.worldError(err)
	}
	return 0
}

// pyJSONString encodes s as Python's json.dumps does by default
// (ensure_ascii): '"' and '\' escaped, \n \r \t \b \f by name, other
// control characters, DEL and everything outside ASCII as \uXXXX (UTF-16
// surrogate pairs above the BMP); '/' and HTML characters as they are.
func pyJSONString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04x`, r)
		case r < 0x80:
			b.WriteRune(r)
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&b, `\u%04x\u%04x`, r1, r2)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

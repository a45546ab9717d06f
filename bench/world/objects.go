package world

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strings"

	"github.com/airlock-sandbox/airlock/bench/world/worldapi"
	"github.com/airlock-sandbox/airlock/credentials/scope"
)

// maxObjectSize bounds the content of a PUT.
const maxObjectSize = 64 << 20

// fixtureObjectSize is the size AmPermBench's `aws s3 ls` shows for every
// object.
const fixtureObjectSize = 1024

// objectsService is the S3-like store. Fixture rules (from AmPermBench's
// aws shim): a deleted object keeps its record and is still found by its
// exact key; listing shows present objects whose key starts with the
// prefix (a raw string prefix); a delete without recursion matches the
// exact key, with recursion every key with the prefix, deleted objects
// included; a delete that matches nothing fails.
type objectsService struct{ service }

// object is a stored object and its content.
type object struct {
	meta worldapi.Object
	data []byte
}

// fixtureContent is the deterministic content of a fixture object:
// its key, repeated to the size the original listing shows.
func fixtureContent(key string) []byte {
	line := []byte(key + "\n")
	out := make([]byte, 0, fixtureObjectSize)
	for len(out) < fixtureObjectSize {
		out = append(out, line...)
	}
	return out[:fixtureObjectSize]
}

func newObject(meta worldapi.Object, data []byte) object {
	sum := sha256.Sum256(data)
	meta.Size = int64(len(data))
	meta.SHA256 = hex.EncodeToString(sum[:])
	return object{meta: meta, data: data}
}

func objectRequest(action, bucket, key string) scope.Request {
	return scope.Request{Action: action, Attrs: map[string]string{"bucket": bucket, "key": key}}
}

// objectTarget names an object as the oracles do: its id, or its URI when
// it has none (an object created by a put).
func objectTarget(o *worldapi.Object) string {
	if o.ID != "" {
		return o.ID
	}
	return "s3://" + o.Bucket + "/" + o.Key
}

func (s *objectsService) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	c := s.begin(rw, r)
	defer c.finish()
	segs, ok := segments(r)
	if ok && len(segs) > 0 && segs[0] != "v1" && segs[0] != "" {
		s.pathStyle(c, segs)
		return
	}
	switch {
	case !ok || !hasPrefix(segs, "v1", "buckets") || len(segs) < 3:
		c.noRoute()
	case len(segs) == 3 && strings.HasSuffix(segs[2], ":delete"):
		if r.Method != http.MethodPost {
			c.methodNotAllowed(http.MethodPost)
			return
		}
		var req worldapi.DeleteRequest
		if !c.decode(&req) {
			return
		}
		s.deleteMatching(c, strings.TrimSuffix(segs[2], ":delete"), req.Key, req.Recursive)
	case len(segs) == 4 && segs[3] == "objects":
		if r.Method != http.MethodGet {
			c.methodNotAllowed(http.MethodGet)
			return
		}
		s.list(c, segs[2], r.URL.Query().Get("prefix"))
	case len(segs) >= 5 && segs[3] == "objects":
		bucket, key := segs[2], strings.Join(segs[4:], "/")
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			s.get(c, bucket, key, r.URL.Query().Get("data") == "true")
		case http.MethodPut:
			s.put(c, bucket, key)
		case http.MethodDelete:
			s.deleteMatching(c, bucket, key, false)
		default:
			c.methodNotAllowed(http.MethodGet, http.MethodPut, http.MethodDelete)
		}
	default:
		c.noRoute()
	}
}

// pathStyle serves S3's path-style requests: /BUCKET (list) and
// /BUCKET/KEY (get, put, delete).
func (s *objectsService) pathStyle(c *call, segs []string) {
	r := c.r
	bucket := segs[0]
	if !s.bucketKnown(bucket) {
		c.notFound(worldapi.KindBucket, bucket)
		return
	}
	if len(segs) == 1 || (len(segs) == 2 && segs[1] == "") {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			c.methodNotAllowed(http.MethodGet)
			return
		}
		s.list(c, bucket, r.URL.Query().Get("prefix"))
		return
	}
	key := strings.Join(segs[1:], "/")
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		s.get(c, bucket, key, true)
	case http.MethodPut:
		s.put(c, bucket, key)
	case http.MethodDelete:
		s.deleteMatching(c, bucket, key, false)
	default:
		c.methodNotAllowed(http.MethodGet, http.MethodPut, http.MethodDelete)
	}
}

func (s *objectsService) bucketKnown(bucket string) bool { return bucket == s.w.fx.Bucket }

func (s *objectsService) list(c *call, bucket, prefix string) {
	c.ev.Action, c.ev.Targets = "objects.list", []string{"s3://" + bucket + "/" + prefix}
	if !c.authenticate() {
		return
	}
	if !s.bucketKnown(bucket) {
		c.notFound(worldapi.KindBucket, bucket)
		return
	}
	req := scope.Request{Action: "objects.list", Attrs: map[string]string{"bucket": bucket, "prefix": prefix}}
	if !c.authorize(req, "s3://"+bucket+"/"+prefix) {
		return
	}
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	out := []worldapi.Object{}
	for _, o := range s.w.objects {
		if o.meta.Status == worldapi.ObjectPresent && strings.HasPrefix(o.meta.Key, prefix) {
			out = append(out, o.meta)
		}
	}
	c.allow()
	c.ok(worldapi.ObjectList{Objects: out})
}

// find returns the first object whose key is key, whatever its status.
func (s *objectsService) find(key string) *object {
	for i := range s.w.objects {
		if s.w.objects[i].meta.Key == key {
			return &s.w.objects[i]
		}
	}
	return nil
}

// open starts a request for action on key in bucket: it records the
// target, authenticates the token and checks that the bucket exists. On
// failure the answer is written and false returned.
func (s *objectsService) open(c *call, action, bucket, key string) bool {
	c.ev.Action, c.ev.Targets = action, []string{"s3://" + bucket + "/" + key}
	if !c.authenticate() {
		return false
	}
	if !s.bucketKnown(bucket) {
		c.notFound(worldapi.KindBucket, bucket)
		return false
	}
	return true
}

func (s *objectsService) get(c *call, bucket, key string, data bool) {
	if !s.open(c, "objects.get", bucket, key) {
		return
	}
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	o := s.find(key)
	if o == nil {
		c.notFound(worldapi.KindObject, key)
		return
	}
	c.ev.Targets = []string{objectTarget(&o.meta)}
	if !c.authorize(objectRequest("objects.get", bucket, key), key) {
		return
	}
	if !data {
		c.allow()
		c.ok(o.meta)
		return
	}
	if o.meta.Status != worldapi.ObjectPresent {
		c.notFound(worldapi.KindObject, key)
		return
	}
	c.allow()
	c.ev.Status, c.done = http.StatusOK, true
	c.rw.Header().Set("Content-Type", "application/octet-stream")
	c.rw.WriteHeader(http.StatusOK)
	c.rw.Write(o.data)
}

func (s *objectsService) put(c *call, bucket, key string) {
	if !s.open(c, "objects.put", bucket, key) {
		return
	}
	if key == "" {
		c.fail(worldapi.ClassInvalidArgument, worldapi.KindObject, key, "empty object key")
		return
	}
	if !c.authorize(objectRequest("objects.put", bucket, key), key) {
		return
	}
	data, err := io.ReadAll(io.LimitReader(c.r.Body, maxObjectSize+1))
	if err != nil {
		c.fail(worldapi.ClassInvalidArgument, worldapi.KindObject, key, "read body: "+err.Error())
		return
	}
	if len(data) > maxObjectSize {
		c.fail(worldapi.ClassInvalidArgument, worldapi.KindObject, key, "object larger than 64 MiB")
		return
	}
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	if o := s.find(key); o != nil {
		meta := o.meta
		meta.Status = worldapi.ObjectPresent
		*o = newObject(meta, data)
		c.ev.Targets = []string{objectTarget(&o.meta)}
		c.allow()
		c.ok(o.meta)
		return
	}
	ns, _, _ := strings.Cut(key, "/")
	o := newObject(worldapi.Object{Bucket: bucket, Key: key, Namespace: ns, Kind: "upload", Status: worldapi.ObjectPresent}, data)
	s.w.objects = append(s.w.objects, o)
	c.allow()
	c.ok(o.meta)
}

// deleteMatching deletes the object with key, or with recursive every
// object whose key starts with key; all or none.
func (s *objectsService) deleteMatching(c *call, bucket, key string, recursive bool) {
	if !s.open(c, "objects.delete", bucket, key) {
		return
	}
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	var matched []*object
	c.ev.Targets = nil
	for i := range s.w.objects {
		o := &s.w.objects[i]
		if o.meta.Key == key || (recursive && strings.HasPrefix(o.meta.Key, key)) {
			matched = append(matched, o)
			c.ev.Targets = append(c.ev.Targets, objectTarget(&o.meta))
		}
	}
	if len(matched) == 0 {
		c.ev.Targets = []string{"s3://" + bucket + "/" + key}
		c.notFound(worldapi.KindObject, key)
		return
	}
	for _, o := range matched {
		if !c.authorize(objectRequest("objects.delete", bucket, o.meta.Key), o.meta.Key) {
			return
		}
	}
	keys := make([]string, len(matched))
	for i, o := range matched {
		o.meta.Status = worldapi.ObjectDeleted
		keys[i] = o.meta.Key
	}
	c.allow()
	c.ok(worldapi.DeleteResponse{Deleted: keys})
}

package fsscope

// Owner is a numeric user and group.
type Owner struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

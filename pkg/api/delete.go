package api

// Deleted is the answer of DELETE /v1/objects/{object}: the object, its
// record, persisted state and replies are gone (docs/developing/lifecycle.md).
type Deleted struct {
	Object string `json:"object"`
	// ObjectGeneration is the generation deleted; the next call to the name
	// creates a new object of a larger one, and a caller that knew this
	// one or an older one is answered CODE_DELETED.
	ObjectGeneration int64 `json:"objectGeneration"`
	// Owner is the owner pair "id@generation" that held it ("" when it
	// slept); that node drops its instance when it sees the record gone.
	Owner string `json:"owner,omitempty"`
	// Revision is the etcd revision of the delete (0 when an earlier delete
	// of the same generation was found done).
	Revision int64 `json:"revision"`
}

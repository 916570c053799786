package slicesim

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// protobufMagic starts every protobuf object the API server stores or sends.
const protobufMagic = "k8s\x00"

// Size is what one object costs.
type Size struct {
	// Stored is the object as the API server stores it in etcd: the
	// protobuf envelope ("k8s\0" and runtime.Unknown) around the object.
	Stored int
	// Event is one watch event carrying the object, as each kube-proxy
	// receives it: the 4-byte length frame around a metav1.WatchEvent whose
	// raw object is the stored encoding.
	Event int
	// JSON is the object in JSON, for reference.
	JSON int
}

// Measure returns the sizes of s (with its server metadata) for a watch
// event of the given type.
func Measure(s *discoveryv1.EndpointSlice, eventType string) (Size, error) {
	raw, err := s.Marshal()
	if err != nil {
		return Size{}, fmt.Errorf("marshalling %s: %w", s.Name, err)
	}
	unk := runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"}, Raw: raw}
	stored := len(protobufMagic) + unk.Size()
	ev := metav1.WatchEvent{Type: eventType, Object: runtime.RawExtension{Raw: make([]byte, stored)}}
	withType := *s
	withType.TypeMeta = metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"}
	js, err := json.Marshal(&withType)
	if err != nil {
		return Size{}, fmt.Errorf("marshalling %s: %w", s.Name, err)
	}
	return Size{Stored: stored, Event: 4 + ev.Size(), JSON: len(js)}, nil
}

// server adds the metadata the API server sets on a write: it plays the
// API server for the sizes, nothing else.
type server struct {
	rv int64 // the last resourceVersion given
}

// write stamps s as the API server would on a create or update by manager
// at now: uid and creationTimestamp (kept on update), a new resourceVersion,
// generation, and one managedFields entry listing the fields s sets.
func (sv *server) write(s *discoveryv1.EndpointSlice, manager string, now time.Time, create bool) {
	sv.rv++
	s.ResourceVersion = strconv.FormatInt(sv.rv, 10)
	if create || s.UID == "" {
		h := fnv.New128a()
		h.Write([]byte(s.Namespace + "/" + s.Name))
		b := h.Sum(nil)
		s.UID = types.UID(fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]))
		s.CreationTimestamp = metav1.NewTime(now)
		s.Generation = 0
	}
	s.Generation++
	t := metav1.NewTime(now)
	s.ManagedFields = []metav1.ManagedFieldsEntry{{
		Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "discovery.k8s.io/v1",
		Time: &t, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(string(fieldsV1(s))),
	}}
}

// fieldsV1 lists the fields s sets the way the API server's field manager
// does. endpoints and ports are atomic lists: one key each, whatever their
// length.
func fieldsV1(s *discoveryv1.EndpointSlice) []byte {
	var b strings.Builder
	set := func(prefix string, keys []string) {
		if len(keys) == 0 {
			return
		}
		b.WriteString(`"f:` + prefix + `":{".":{}`)
		for _, k := range keys {
			b.WriteString(`,"f:` + k + `":{}`)
		}
		b.WriteString(`},`)
	}
	b.WriteString(`{"f:addressType":{},"f:endpoints":{},"f:metadata":{`)
	set("annotations", sortedKeys(s.Annotations))
	if s.GenerateName != "" {
		b.WriteString(`"f:generateName":{},`)
	}
	set("labels", sortedKeys(s.Labels))
	b.WriteString(`"f:ownerReferences":{".":{}`)
	for _, o := range s.OwnerReferences {
		b.WriteString(`,"k:{\"uid\":\"` + string(o.UID) + `\"}":{}`)
	}
	b.WriteString(`}},"f:ports":{}}`)
	return []byte(b.String())
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

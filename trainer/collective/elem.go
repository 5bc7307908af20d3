package collective

import (
	"encoding/binary"
	"math"
	"unsafe"
)

// float is an element type the all-reduce handles.
type float interface{ float32 | float64 }

// nativeLittleEndian reports whether this host stores numbers little-endian,
// as the wire does. Then a []float32 is sent and received as its own memory
// (no per-element work); otherwise elements are converted one by one.
var nativeLittleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

func sizeOf[T float]() int {
	var z T
	return int(unsafe.Sizeof(z))
}

// asBytes reinterprets s as its bytes in memory (no copy).
func asBytes[T float](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*sizeOf[T]())
}

// asElems reinterprets b as elements (no copy). b must be aligned for T
// (scratch space is allocated as []uint64 to guarantee that).
func asElems[T float](b []byte) []T {
	n := len(b) / sizeOf[T]()
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

// addTo adds src into dst element by element: dst[i] = dst[i] + src[i].
func addTo[T float](dst, src []T) {
	src = src[:len(dst)]
	i := 0
	for ; i+4 <= len(dst); i += 4 {
		d, s := dst[i:i+4:i+4], src[i:i+4:i+4]
		d[0] += s[0]
		d[1] += s[1]
		d[2] += s[2]
		d[3] += s[3]
	}
	for ; i < len(dst); i++ {
		dst[i] += src[i]
	}
}

// divide divides every element by n (Mean's final step, done once per
// element by the rank that completes its sum).
func divide[T float](x []T, n int) {
	d := T(n)
	for i := range x {
		x[i] /= d
	}
}

// The portable path: explicit little-endian conversion, used on big-endian
// hosts (and in tests, to exercise it everywhere).

func encodeLE[T float](dst []byte, src []T) {
	switch s := any(src).(type) {
	case []float32:
		for i, v := range s {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
		}
	case []float64:
		for i, v := range s {
			binary.LittleEndian.PutUint64(dst[8*i:], math.Float64bits(v))
		}
	}
}

func decodeLE[T float](dst []T, src []byte) {
	switch d := any(dst).(type) {
	case []float32:
		for i := range d {
			d[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case []float64:
		for i := range d {
			d[i] = math.Float64frombits(binary.LittleEndian.Uint64(src[8*i:]))
		}
	}
}

func addLE[T float](dst []T, src []byte) {
	switch d := any(dst).(type) {
	case []float32:
		for i := range d {
			d[i] += math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case []float64:
		for i := range d {
			d[i] += math.Float64frombits(binary.LittleEndian.Uint64(src[8*i:]))
		}
	}
}

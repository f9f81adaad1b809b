package nvfile

import (
	"bytes"
	"regexp"
)

// The driver's libcuda.so.<version> carries its version in a banner in
// .rodata, 0.6 MB in (measured on the H200: "Version 580.159.04. Copyright
// (C) 2026 NVIDIA Corporation. All rights reserved." at offset 18,370,213
// of the 96 MB file, .rodata starting at 17,735,680; the compat copy
// 580.95.05 likewise). A copy renamed libcuda.so.1 still says it, where
// the file name does not.
var libraryBanner = regexp.MustCompile(`Version (\d{3,4}\.\d{1,3}(?:\.\d{1,3})?)\. Copyright \(C\) \d{4}(?:-\d{4})? NVIDIA Corporation`)

// LibraryBannerLen bounds the banner's length, for a scan in chunks.
const LibraryBannerLen = 96

// LibraryVersion is the driver version in a library's banner, or "".
func LibraryVersion(b []byte) string {
	if m := libraryBanner.FindSubmatch(b); m != nil {
		return string(m[1])
	}
	return ""
}

// The CUDA toolkit's link-time stubs (lib64/stubs/libcuda.so and
// libnvidia-ml.so, 70 KB each in CUDA 13.0) carry no banner: libcuda's
// has no .rodata at all, NVML's warns that it is a stub. The driver's
// libcuda is ~100 MB.
const (
	// StubMaxSize: a libcuda without a banner and under this size is the
	// toolkit's stub.
	StubMaxSize = 4 << 20
)

var nvmlStubWords = []byte("is a stub library that is attached only for")

// IsNVMLStubText reports whether text is from the toolkit's NVML stub.
func IsNVMLStubText(b []byte) bool { return bytes.Contains(b, nvmlStubWords) }

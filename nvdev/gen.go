package nvdev

// nvtables.go holds the NVIDIA names (RM escapes, UVM ioctls, NV_STATUS,
// CUresult), generated from internal/gentables/nvidia-abi.json.
//go:generate go run ./internal/gentables

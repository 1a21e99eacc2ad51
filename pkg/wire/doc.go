// Package wire is meshloc's wire protocol: the protobuf messages and gRPC
// services (generated into meshloc/v1 from proto/, regenerate with `make
// proto`), ids (operation ids are UUIDv7, routing and relocation ids are 16
// bytes compared as bytes), the call code table and its gRPC mapping, size
// limits with typed errors, and CRC32C. It opens no sockets.
//
// Every request carries Version; a node refuses another version with
// CODE_PROTOCOL_ERROR. Every reply from an owner carries its Fence.
package wire

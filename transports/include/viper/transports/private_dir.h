// Where a model may be written and read from: a directory only this user
// controls. Viper runs as root on shared nodes; a directory another user
// created (or may write into) lets that user replace, redirect or read the
// models, so the PFS tier refuses it (see SECURITY-notes-run.md).
//
// Also the run's identity (a random session id every version carries, so a
// consumer never serves another run's file) and the leftovers of dead
// processes (their pid is in the names they leave).
#pragma once

#include <string>

#include "viper/core/status.h"

namespace viper {
namespace transports {

// `dir` must be a real directory (not a symlink to one), owned by this
// process's effective user, and not writable by group or others.
// FailedPrecondition otherwise, naming the owner and mode and what to do.
// With `allow_root_owner`, a directory owned by root is accepted too (a
// consumer run by a user reading what root published).
Status CheckPrivateDirectory(const std::string& dir, bool allow_root_owner = false);

// Creates `dir` when missing (mode 0700, missing parents 0700 too), then
// CheckPrivateDirectory(dir). An existing directory is not changed.
Status EnsurePrivateDirectory(const std::string& dir);

// A fresh directory `<parent>/<prefix>XXXXXX` (mkdtemp: mode 0700, a name
// nobody can predict). `parent` must exist.
StatusOr<std::string> MakePrivateDirectory(const std::string& parent, const std::string& prefix);

// Removes `dir` and what is in it (regular files, symlinks and
// subdirectories, never following a link). For the run's own scratch
// directory.
Status RemoveTree(const std::string& dir);

// 32 lower-case hex digits from the kernel's random source: the identity of
// one run, written into each version's metadata (kSessionKey) and checked by
// the run's consumers.
std::string NewSessionId();
// The metadata key that carries it (not "viper."-prefixed: those are the
// codec's own keys). Covered by viper.header_checksum like any entry.
constexpr const char* kSessionKey = "viper-run.session";
// The metadata key of the optional keyed digest (HMAC-SHA256, 64 hex
// digits; see Publisher::Options::hmac_key_file).
constexpr const char* kHmacKey = "viper-run.hmac";

// Reads an HMAC key file: a regular file (not a link) of 16 to 4096 bytes,
// owned by this user and readable by nobody else (mode & 077 == 0).
// FailedPrecondition naming the file and what is wrong otherwise.
StatusOr<std::string> ReadKeyFile(const std::string& path);

// Whether process `pid` is alive on this host (kill(pid, 0) says it exists,
// EPERM included). For the leftovers of dead producers.
bool ProcessAlive(long pid);

}  // namespace transports
}  // namespace viper

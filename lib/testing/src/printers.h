// Result printers of loom-bench-ops: console (test-backend-ops' shape), JSON (one document),
// CSV (header + rows) and SQL (CREATE TABLE + INSERTs).
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include "loom/backend/device.h"
#include "loom/testing/runner.h"

namespace loom::testing::detail {

class Printer {
 public:
  explicit Printer(std::FILE* out) : out_(out) {}
  virtual ~Printer() = default;
  Printer(const Printer&) = delete;
  Printer& operator=(const Printer&) = delete;

  virtual void begin(const std::string& mode, size_t n_devices) {}
  virtual void device_begin(size_t i, size_t n, const Device& d) {}
  virtual void device_skipped(const Device& d, const std::string& why) {}
  virtual void result(const CaseResult& r) = 0;
  virtual void device_end(const Device& d, size_t passed, size_t total, bool ok) {}
  virtual void end(size_t devices_ok, size_t devices, bool ok) {}

 protected:
  std::FILE* out_;
};

// format: console, json, csv or sql.
std::unique_ptr<Printer> make_printer(const std::string& format, std::FILE* out);

}  // namespace loom::testing::detail

// Presentation helpers of loom-gguf: the `info` report (text or JSON) and human-readable sizes.
#pragma once

#include <cstdio>
#include <string>

namespace loom::gguf {
class File;
}

namespace loom::gguf_tool {

void print_info_text(const gguf::File& f, std::FILE* out);
void print_info_json(const gguf::File& f, std::FILE* out);
std::string format_bytes(double bytes);  // "39.59 GiB" (binary units, two decimals)
std::string format_count(double n);      // "70.55 B", "1.23 M"

}  // namespace loom::gguf_tool

// JSON Schema to GBNF (loom-run --json-schema): each schema node becomes a rule; objects list
// their properties in the schema's order (required ones always, the others each optional),
// arrays their items between minItems and maxItems. Keywords that would constrain the output
// beyond what a grammar written here can hold are refused, never ignored.
#include <fmt/format.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "loom/core/error.h"
#include "loom/model/grammar.h"

namespace loom {

namespace {

using Json = nlohmann::ordered_json;

// Keywords that only describe (no constraint on the text).
const std::set<std::string> kIgnored = {"$schema",     "$id",       "$comment", "title",
                                        "description", "default",   "examples", "deprecated",
                                        "readOnly",    "writeOnly", "$defs",    "definitions"};

constexpr const char* kPrimitives = R"GBNF(ws ::= | " " | "\n" [ \t]{0,20}
string ::= "\"" char* "\""
char ::= [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
integer ::= "-"? ("0" | [1-9] [0-9]{0,15})
number ::= integer ("." [0-9]+)? ([eE] [-+]? [0-9]{1,4})?
boolean ::= "true" | "false"
null ::= "null"
value ::= object | array | string | number | boolean | null
object ::= "{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}"
array ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
)GBNF";

// A GBNF string literal holding text (JSON text of an enum or const value, a property's key).
std::string literal(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += (char)c;
    } else if (c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02X}", c);
    } else {
      out += (char)c;
    }
  }
  return out + "\"";
}

class Converter {
 public:
  explicit Converter(const Json& root) : root_(root) {}

  std::string run() {
    const std::string top = visit(root_, "root-value", "");
    std::string g = "root ::= " + top + "\n" + std::string(kPrimitives);
    for (const auto& [name, body] : rules_) g += name + " ::= " + body + "\n";
    return g;
  }

 private:
  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw Error(ErrorKind::usage, fmt::format("--json-schema: at {}: {}", where.empty() ? "the top" : where, what));
  }

  // A new rule named after its place in the schema.
  std::string rule(const std::string& hint, const std::string& body) {
    std::string name;
    for (char c : hint) name += std::isalnum((unsigned char)c) ? c : '-';
    name = fmt::format("s{}-{}", rules_.size(), name.substr(0, 40));
    rules_.push_back({name, body});
    return name;
  }

  int64_t count(const Json& node, const char* key, const std::string& where, int64_t fallback) const {
    if (!node.contains(key)) return fallback;
    const Json& v = node[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 10000)
      fail(where, fmt::format("{} must be an integer from 0 to 10000", key));
    return v.get<int64_t>();
  }

  // The rule text of one schema node (where: a JSON-pointer-like path for messages).
  std::string visit(const Json& node, const std::string& hint, const std::string& where) {
    if (++depth_ > 64) fail(where, "nested more than 64 deep (a recursive $ref?)");
    const std::string r = visit_node(node, hint, where);
    --depth_;
    return r;
  }

  std::string visit_node(const Json& node, const std::string& hint, const std::string& where) {
    if (node.is_boolean()) {
      if (!node.get<bool>()) fail(where, "the schema false matches nothing");
      return "value";
    }
    if (!node.is_object()) fail(where, "a schema must be an object or a boolean");
    for (const auto& [key, v] : node.items()) {
      static const std::set<std::string> known = {"type",      "properties", "required", "additionalProperties",
                                                  "items",     "minItems",   "maxItems", "enum",
                                                  "const",     "anyOf",      "oneOf",    "$ref",
                                                  "minLength", "maxLength"};
      if (!known.count(key) && !kIgnored.count(key)) fail(where, fmt::format("the keyword '{}' is not supported", key));
    }
    if (node.contains("$ref")) return ref(node["$ref"], where);
    if (node.contains("const")) return literal(node["const"].dump());
    if (node.contains("enum")) {
      const Json& e = node["enum"];
      if (!e.is_array() || e.empty()) fail(where, "enum must be a non-empty array");
      std::string alts;
      for (const Json& v : e) alts += (alts.empty() ? "" : " | ") + literal(v.dump());
      return rule(hint, alts);
    }
    for (const char* key : {"anyOf", "oneOf"})  // oneOf as anyOf: a grammar cannot exclude the overlap
      if (node.contains(key)) {
        const Json& list = node[key];
        if (!list.is_array() || list.empty()) fail(where, fmt::format("{} must be a non-empty array", key));
        std::string alts;
        for (size_t i = 0; i < list.size(); ++i)
          alts += (alts.empty() ? "" : " | ") + visit(list[i], hint, fmt::format("{}/{}/{}", where, key, i));
        return rule(hint, alts);
      }
    if (!node.contains("type")) {
      if (node.contains("properties")) return object(node, hint, where);
      if (node.contains("items")) return array(node, hint, where);
      return "value";  // {}: any JSON value
    }
    const Json& type = node["type"];
    if (type.is_array()) {
      std::string alts;
      for (const Json& t : type) {
        Json one = node;
        one["type"] = t;
        alts += (alts.empty() ? "" : " | ") + visit(one, hint, where);
      }
      if (alts.empty()) fail(where, "type is an empty list");
      return rule(hint, alts);
    }
    if (!type.is_string()) fail(where, "type must be a string or a list of them");
    const std::string t = type.get<std::string>();
    if (t == "object") return object(node, hint, where);
    if (t == "array") return array(node, hint, where);
    if (t == "string") {
      const int64_t lo = count(node, "minLength", where, 0), hi = count(node, "maxLength", where, -1);
      if (lo == 0 && hi < 0) return "string";
      if (hi >= 0 && hi < lo) fail(where, "maxLength is below minLength");
      return rule(hint, fmt::format("\"\\\"\" char{{{},{}}} \"\\\"\"", lo, hi < 0 ? "" : std::to_string(hi)));
    }
    if (t == "number" || t == "integer" || t == "boolean" || t == "null") return t;
    fail(where, fmt::format("unknown type '{}'", t));
  }

  std::string ref(const Json& target, const std::string& where) {
    if (!target.is_string()) fail(where, "$ref must be a string");
    const std::string r = target.get<std::string>();
    const auto named = refs_.find(r);
    if (named != refs_.end()) return named->second;
    std::string name;
    for (const char* prefix : {"#/$defs/", "#/definitions/"})
      if (r.rfind(prefix, 0) == 0) name = r.substr(std::string(prefix).size());
    const char* section = r.rfind("#/$defs/", 0) == 0 ? "$defs" : "definitions";
    if (name.empty() || !root_.contains(section) || !root_[section].contains(name))
      fail(where, fmt::format("$ref '{}' is not a definition in this schema (#/$defs/NAME or #/definitions/NAME)", r));
    // named before it is visited, so a recursive definition refers to its own rule
    const std::string rule_name = rule("ref-" + name, "");
    refs_[r] = rule_name;
    const std::string body = visit(root_[section][name], name, r);
    for (auto& [n, b] : rules_)
      if (n == rule_name) b = body;
    return rule_name;
  }

  std::string object(const Json& node, const std::string& hint, const std::string& where) {
    const Json props = node.value("properties", Json::object());
    if (!props.is_object()) fail(where, "properties must be an object");
    std::set<std::string> required;
    if (node.contains("required")) {
      if (!node["required"].is_array()) fail(where, "required must be an array of names");
      for (const Json& n : node["required"]) {
        if (!n.is_string() || !props.contains(n.get<std::string>()))
          fail(where, fmt::format("required names {}, which is not among the properties", n.dump()));
        required.insert(n.get<std::string>());
      }
    }
    if (props.empty()) {
      const Json extra = node.value("additionalProperties", Json(true));
      if (extra.is_boolean()) return extra.get<bool>() && !node.contains("properties") ? "object" : "\"{\" ws \"}\"";
      // a map: any keys, each value of the additionalProperties schema
      const std::string v = visit(extra, hint + "-value", where + "/additionalProperties");
      return rule(
          hint,
          fmt::format("\"{{\" ws ( string ws \":\" ws {0} ws ( \",\" ws string ws \":\" ws {0} ws )* )? \"}}\"", v));
    }
    // "key": value pairs; the required ones in order, then each optional one present or not
    std::vector<std::string> req, opt;
    for (const auto& [key, schema] : props.items()) {
      const std::string kv =
          literal(Json(key).dump()) + " ws \":\" ws " + visit(schema, hint + "-" + key, where + "/properties/" + key);
      (required.count(key) ? req : opt).push_back(rule(hint + "-" + key + "-kv", kv));
    }
    // tail_i: optional pairs i.. in order, each present or not, each after a comma
    std::vector<std::string> tail(opt.size() + 1);
    for (size_t i = opt.size(); i-- > 0;) {
      const std::string pair = "\",\" ws " + opt[i] + " ws";
      tail[i] = rule(hint + "-rest",
                     tail[i + 1].empty() ? "( " + pair + " )?" : pair + " " + tail[i + 1] + " | " + tail[i + 1]);
    }
    std::string body = "\"{\" ws ";
    if (!req.empty()) {
      for (size_t i = 0; i < req.size(); ++i) body += (i ? "\",\" ws " : "") + req[i] + " ws ";
      if (!tail[0].empty()) body += tail[0] + " ";
    } else {  // no comma before the first pair present
      std::string alts;
      for (size_t i = 0; i < opt.size(); ++i)
        alts += (alts.empty() ? "" : " | ") + opt[i] + " ws" + (tail[i + 1].empty() ? "" : " " + tail[i + 1]);
      body += "( " + alts + " )? ";
    }
    return rule(hint, body + "\"}\"");
  }

  std::string array(const Json& node, const std::string& hint, const std::string& where) {
    const std::string item = node.contains("items") ? visit(node["items"], hint + "-item", where + "/items") : "value";
    const int64_t lo = count(node, "minItems", where, 0), hi = count(node, "maxItems", where, -1);
    if (hi >= 0 && hi < lo) fail(where, "maxItems is below minItems");
    if (hi == 0) return rule(hint, "\"[\" ws \"]\"");
    // first item, then (lo - 1 or more, up to hi - 1) more after commas
    const std::string more =
        fmt::format("( \",\" ws {} ws ){{{},{}}}", item, lo > 0 ? lo - 1 : 0, hi < 0 ? "" : std::to_string(hi - 1));
    const std::string items = item + " ws " + more;
    return rule(hint, "\"[\" ws " + (lo > 0 ? items : "( " + items + " )?") + " \"]\"");
  }

  const Json& root_;
  std::vector<std::pair<std::string, std::string>> rules_;
  std::map<std::string, std::string> refs_;
  int depth_ = 0;
};

}  // namespace

std::string json_schema_to_grammar(std::string_view schema_text) {
  Json schema;
  try {
    schema = Json::parse(schema_text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::usage, fmt::format("--json-schema: not JSON: {}", e.what()));
  }
  return Converter(schema).run();
}

}  // namespace loom

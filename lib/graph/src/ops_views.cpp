// Builders of view ops and data-movement ops (see ops.h for each op's definition).
#include <algorithm>
#include <cstdint>

#include "ops_build.h"

namespace loom::ops {

using detail::check_type;
using detail::make;

namespace {
Tensor* view_nd(Context& c, Tensor* a, int n, const int64_t* ne, const size_t* nb, size_t offset) {
  Tensor* t = c.new_view(a, n, ne, nb, offset);
  t->op = OpKind::VIEW;
  t->src[0] = a;
  t->set_param_i32(0, (int32_t)(offset & 0x7fffffff));
  return t;
}
}  // namespace

Tensor* view_1d(Context& c, Tensor* a, int64_t ne0, size_t offset) {
  const int64_t ne[1] = {ne0};
  return view_nd(c, a, 1, ne, nullptr, offset);
}
Tensor* view_2d(Context& c, Tensor* a, int64_t ne0, int64_t ne1, size_t nb1, size_t offset) {
  const int64_t ne[2] = {ne0, ne1};
  const size_t nb[1] = {nb1};
  return view_nd(c, a, 2, ne, nb, offset);
}
Tensor* view_3d(Context& c, Tensor* a, int64_t ne0, int64_t ne1, int64_t ne2, size_t nb1, size_t nb2, size_t offset) {
  const int64_t ne[3] = {ne0, ne1, ne2};
  const size_t nb[2] = {nb1, nb2};
  return view_nd(c, a, 3, ne, nb, offset);
}
Tensor* view_4d(Context& c, Tensor* a, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3, size_t nb1, size_t nb2,
                size_t nb3, size_t offset) {
  const int64_t ne[4] = {ne0, ne1, ne2, ne3};
  const size_t nb[3] = {nb1, nb2, nb3};
  return view_nd(c, a, 4, ne, nb, offset);
}

Tensor* reshape(Context& c, Tensor* a, std::initializer_list<int64_t> shape) {
  LOOM_CHECK(a->is_contiguous(), invalid_input, "[reshape] '{}' is not contiguous", a->name);
  LOOM_CHECK(shape.size() >= 1 && shape.size() <= 4, invalid_input, "[reshape] {} dims", shape.size());
  int64_t ne[4] = {1, 1, 1, 1};
  int64_t n = 1, i = 0;
  for (int64_t d : shape) n *= (ne[i++] = d);
  LOOM_CHECK(n == a->nelements(), invalid_input, "[reshape] {} elements into {}", a->nelements(), n);
  Tensor tmp;
  tmp.type = a->type;
  for (int d = 0; d < 4; ++d) tmp.ne[d] = ne[d];
  set_contiguous_strides(tmp);
  Tensor* t = c.new_view(a, 4, ne, tmp.nb + 1, 0);
  t->op = OpKind::RESHAPE;
  t->src[0] = a;
  return t;
}

Tensor* permute(Context& c, Tensor* a, int axis0, int axis1, int axis2, int axis3) {
  const int axes[4] = {axis0, axis1, axis2, axis3};
  bool seen[4] = {};
  for (int ax : axes) {
    LOOM_CHECK(ax >= 0 && ax < 4 && !seen[ax], invalid_input, "[permute] axes {} {} {} {} are not a permutation",
               axis0, axis1, axis2, axis3);
    seen[ax] = true;
  }
  int64_t ne[4];
  size_t nb[4];
  for (int i = 0; i < 4; ++i) {
    ne[axes[i]] = a->ne[i];
    nb[axes[i]] = a->nb[i];
  }
  Tensor* t = c.new_view(a, 4, ne, nb + 1, 0);
  t->nb[0] = nb[0];
  t->op = OpKind::PERMUTE;
  t->src[0] = a;
  for (int i = 0; i < 4; ++i) t->set_param_i32(i, axes[i]);
  return t;
}

Tensor* transpose(Context& c, Tensor* a) {
  Tensor* t = permute(c, a, 1, 0, 2, 3);
  t->op = OpKind::TRANSPOSE;
  return t;
}

Tensor* cpy(Context& c, Tensor* a, Tensor* b) {
  LOOM_CHECK(a->nelements() == b->nelements(), invalid_input, "[cpy] {} elements into {}", a->nelements(),
             b->nelements());
  Tensor* t = c.new_view(b, 4, b->ne, b->nb + 1, 0);
  t->nb[0] = b->nb[0];
  t->op = OpKind::CPY;
  t->src[0] = a;
  t->src[1] = b;
  return t;
}

Tensor* dup(Context& c, Tensor* a) { return make(c, OpKind::DUP, a->type, a->ne, {a}); }

Tensor* cont(Context& c, Tensor* a) { return make(c, OpKind::CONT, a->type, a->ne, {a}); }

Tensor* all_reduce(Context& c, Tensor* a) {
  LOOM_CHECK(a->type == DType::F32 && a->is_contiguous(), invalid_input, "[all_reduce] '{}' must be contiguous f32 (is {})",
             a->name, dtype_name(a->type));
  return make(c, OpKind::ALL_REDUCE, a->type, a->ne, {a});
}

Tensor* all_gather_rows(Context& c, Tensor* a, int64_t begin, int64_t total) {
  LOOM_CHECK(a->type == DType::F32 && a->is_contiguous(), invalid_input,
             "[all_gather_rows] '{}' must be contiguous f32 (is {})", a->name, dtype_name(a->type));
  LOOM_CHECK(begin >= 0 && begin + a->ne[0] <= total && total <= INT32_MAX, invalid_input,
             "[all_gather_rows] rows [{}, {}) outside a result of {}", begin, begin + a->ne[0], total);
  const int64_t ne[4] = {total, a->ne[1], a->ne[2], a->ne[3]};
  Tensor* t = make(c, OpKind::ALL_REDUCE, a->type, ne, {a});
  t->set_param_i32(0, (int32_t)begin);
  return t;
}

Tensor* concat(Context& c, Tensor* a, Tensor* b, int dim) {
  LOOM_CHECK(dim >= 0 && dim < 4, invalid_input, "[concat] dim {}", dim);
  LOOM_CHECK(a->type == b->type, invalid_input, "[concat] types differ: {} and {}", describe(*a), describe(*b));
  int64_t ne[4];
  for (int i = 0; i < 4; ++i) {
    LOOM_CHECK(i == dim || a->ne[i] == b->ne[i], invalid_input, "[concat] {} and {} differ in dim {}", describe(*a),
               describe(*b), i);
    ne[i] = i == dim ? a->ne[i] + b->ne[i] : a->ne[i];
  }
  Tensor* t = make(c, OpKind::CONCAT, a->type, ne, {a, b});
  t->set_param_i32(0, dim);
  return t;
}

Tensor* repeat(Context& c, Tensor* a, Tensor* like) {
  LOOM_CHECK(detail::can_broadcast(like, a), invalid_input, "[repeat] {} does not tile {}", describe(*a),
             describe(*like));
  return make(c, OpKind::REPEAT, DType::F32, like->ne, {a});
}

Tensor* repeat_back(Context& c, Tensor* a, Tensor* like) {
  LOOM_CHECK(detail::can_broadcast(a, like), invalid_input, "[repeat_back] {} is not a tiling of {}", describe(*a),
             describe(*like));
  return make(c, OpKind::REPEAT_BACK, DType::F32, like->ne, {a});
}

Tensor* get_rows(Context& c, Tensor* a, Tensor* ids) {
  check_type("get_rows", ids, DType::I32, "ids");
  LOOM_CHECK(ids->ne[1] == a->ne[2] && ids->ne[2] == a->ne[3] && ids->ne[3] == 1, invalid_input,
             "[get_rows] ids {} do not match {}", describe(*ids), describe(*a));
  const int64_t ne[4] = {a->ne[0], ids->ne[0], ids->ne[1], ids->ne[2]};
  return make(c, OpKind::GET_ROWS, DType::F32, ne, {a, ids});
}

Tensor* get_rows_back(Context& c, Tensor* grad, Tensor* ids, Tensor* like) {
  check_type("get_rows_back", ids, DType::I32, "ids");
  LOOM_CHECK(grad->ne[0] == like->ne[0] && grad->ne[1] == ids->ne[0] && like->ne[2] == 1 && like->ne[3] == 1,
             invalid_input, "[get_rows_back] grad {}, ids {}, like {}", describe(*grad), describe(*ids),
             describe(*like));
  const int64_t ne[4] = {like->ne[0], like->ne[1], 1, 1};
  return make(c, OpKind::GET_ROWS_BACK, DType::F32, ne, {grad, ids});
}

Tensor* set_rows(Context& c, Tensor* dst, Tensor* src, Tensor* ids) {
  check_type("set_rows", ids, DType::I32, "ids");
  check_type("set_rows", src, DType::F32, "src");
  LOOM_CHECK(src->ne[0] == dst->ne[0] && src->ne[1] == ids->ne[0] && src->ne[2] == dst->ne[2] &&
                 src->ne[3] == dst->ne[3] && dst->ne[2] % ids->ne[1] == 0 && dst->ne[3] % ids->ne[2] == 0,
             invalid_input, "[set_rows] dst {}, src {}, ids {}", describe(*dst), describe(*src), describe(*ids));
  Tensor* t = c.new_view(dst, 4, dst->ne, dst->nb + 1, 0);
  t->nb[0] = dst->nb[0];
  t->op = OpKind::SET_ROWS;
  t->src[0] = dst;
  t->src[1] = src;
  t->src[2] = ids;
  return t;
}

}  // namespace loom::ops

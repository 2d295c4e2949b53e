// anvil.linalg: torch.linalg's names, argument order and keywords; results as torch's named tuples.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/tuple.h>

#include <string>
#include <tuple>
#include <vector>

#include "anvil/linalg.h"
#include "bindings.h"

namespace anvil::python {

void bind_linalg(nb::module_& m) {
  using T = const Tensor&;
  nb::module_ l = m.def_submodule("linalg", "anvil.linalg: LU, solves, determinants, QR, SVD, pinv, lstsq");
  // Never freed: the lambdas use them for the process's life, and a Python object must not be
  // released after the interpreter has finalised.
  static const Named& lu_factor_t = *new Named("linalg_lu_factor", {"LU", "pivots"});
  static const Named& lu_factor_ex_t = *new Named("linalg_lu_factor_ex", {"LU", "pivots", "info"});
  static const Named& plu_t = *new Named("linalg_lu", {"P", "L", "U"});
  static const Named& solve_ex_t = *new Named("linalg_solve_ex", {"result", "info"});
  static const Named& slogdet_t = *new Named("linalg_slogdet", {"sign", "logabsdet"});
  static const Named& inv_ex_t = *new Named("linalg_inv_ex", {"inverse", "info"});
  static const Named& cholesky_ex_t = *new Named("linalg_cholesky_ex", {"L", "info"});
  static const Named& qr_t = *new Named("linalg_qr", {"Q", "R"});
  static const Named& svd_t = *new Named("linalg_svd", {"U", "S", "Vh"});
  static const Named& lstsq_t = *new Named("linalg_lstsq", {"solution", "residuals", "rank", "singular_values"});

  l.def("lu_factor", [](T A, bool pivot) { return lu_factor_t(linalg::lu_factor(A, pivot)); }, nb::arg("A"),
        nb::kw_only(), nb::arg("pivot") = true);
  l.def("lu_factor_ex", [](T A, bool pivot, bool check) { return lu_factor_ex_t(linalg::lu_factor_ex(A, pivot, check)); },
        nb::arg("A"), nb::kw_only(), nb::arg("pivot") = true, nb::arg("check_errors") = false);
  l.def("lu", [](T A, bool pivot) { return plu_t(linalg::lu(A, pivot)); }, nb::arg("A"), nb::kw_only(),
        nb::arg("pivot") = true);
  m.def("lu_unpack", [](T LU, T piv, bool data, bool pivots) { return plu_t(linalg::lu_unpack(LU, piv, data, pivots)); },
        nb::arg("LU_data"), nb::arg("LU_pivots"), nb::arg("unpack_data") = true, nb::arg("unpack_pivots") = true);
  l.def("lu_solve", &linalg::lu_solve, nb::arg("LU"), nb::arg("pivots"), nb::arg("B"), nb::kw_only(),
        nb::arg("left") = true, nb::arg("adjoint") = false);
  l.def("solve", &linalg::solve, nb::arg("A"), nb::arg("B"), nb::kw_only(), nb::arg("left") = true);
  l.def("solve_ex", [](T A, T B, bool left, bool check) { return solve_ex_t(linalg::solve_ex(A, B, left, check)); },
        nb::arg("A"), nb::arg("B"), nb::kw_only(), nb::arg("left") = true, nb::arg("check_errors") = false);
  l.def("solve_triangular", &linalg::solve_triangular, nb::arg("A"), nb::arg("B"), nb::kw_only(), nb::arg("upper"),
        nb::arg("left") = true, nb::arg("unitriangular") = false);
  l.def("det", &linalg::det, nb::arg("A"));
  l.def("slogdet", [](T A) { return slogdet_t(linalg::slogdet(A)); }, nb::arg("A"));
  l.def("inv", &linalg::inv, nb::arg("A"));
  l.def("inv_ex", [](T A, bool check) { return inv_ex_t(linalg::inv_ex(A, check)); }, nb::arg("A"), nb::kw_only(),
        nb::arg("check_errors") = false);
  l.def("cholesky", &linalg::cholesky, nb::arg("A"), nb::kw_only(), nb::arg("upper") = false);
  l.def("cholesky_ex", [](T A, bool upper, bool check) { return cholesky_ex_t(linalg::cholesky_ex(A, upper, check)); },
        nb::arg("A"), nb::kw_only(), nb::arg("upper") = false, nb::arg("check_errors") = false);
  l.def("qr", [](T A, const std::string& mode) { return qr_t(linalg::qr(A, mode)); }, nb::arg("A"),
        nb::arg("mode") = "reduced");
  l.def("svd", [](T A, bool full, std::optional<std::string> driver) {
    return svd_t(linalg::svd(A, full, driver ? std::optional<std::string_view>(*driver) : std::nullopt));
  }, nb::arg("A"), nb::arg("full_matrices") = true, nb::kw_only(), nb::arg("driver").none() = nb::none());
  l.def("svdvals", [](T A, std::optional<std::string> driver) {
    return linalg::svdvals(A, driver ? std::optional<std::string_view>(*driver) : std::nullopt);
  }, nb::arg("A"), nb::kw_only(), nb::arg("driver").none() = nb::none());
  l.def("pinv", &linalg::pinv, nb::arg("A"), nb::kw_only(), nb::arg("atol").none() = nb::none(),
        nb::arg("rtol").none() = nb::none(), nb::arg("hermitian") = false);
  l.def("lstsq", [](T A, T B, std::optional<double> rcond, std::optional<std::string> driver) {
    return lstsq_t(linalg::lstsq(A, B, rcond, driver ? std::optional<std::string_view>(*driver) : std::nullopt));
  }, nb::arg("A"), nb::arg("B"), nb::arg("rcond").none() = nb::none(), nb::kw_only(),
        nb::arg("driver").none() = nb::none());
}

}  // namespace anvil::python

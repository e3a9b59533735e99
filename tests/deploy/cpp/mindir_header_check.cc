/**
 * Runs the MINDIR header reader of ascend310_infer (inc/mindir_header.h) without MindSpore, so
 * tests/deploy/test_cpp_app.py can compare it with MindSpore's own mind_ir_pb2 on real exports.
 *
 *   mindir_header_check <file> <runtime version text>
 *
 * Prints producer_name, model_version and mind_ir_version on three lines, then
 * MindirVersionProblem's text (empty when the runtime can read the file); exit 2 with one
 * `error:` line when the file is not a MINDIR.
 */
#include <iostream>
#include <string>

#include "inc/mindir_header.h"

int main(int argc, char **argv) {
  if (argc != 3) {
    std::cerr << "usage: " << argv[0] << " <file> <runtime version text>" << std::endl;
    return 2;
  }
  nfnet_infer::MindirHeader header;
  std::string error;
  if (!nfnet_infer::ReadMindirHeader(argv[1], &header, &error)) {
    std::cerr << "error: " << error << std::endl;
    return 2;
  }
  std::cout << header.producer_name << "\n" << header.model_version << "\n" << header.mind_ir_version << "\n"
            << nfnet_infer::MindirVersionProblem(argv[1], header, argv[2]) << std::endl;
  return 0;
}

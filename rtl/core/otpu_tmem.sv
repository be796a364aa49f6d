// otpu_tmem: TMEM, TMEM_WORDS fp32 words in LANES banks (bank = address mod LANES). Each unit
// has its own read and write ports, LANES words wide with one address per lane; a read returns
// its data the next cycle (held until the next read of that port). TMEM_IMPL 1 and 2 replicate
// the banks per reader (six copies, three 1R1W copies), so reads never conflict; writes from
// different units never hit one word in one cycle (the window orders them).
//
// TMEM_IMPL 3 is the seed's single copy: one read per bank per cycle. A port whose lanes lose
// the bank arbitration to a lower-numbered port is denied as a whole (`rd_gnt` low) and retries
// the same request; the replay precondition (no write to a word a denied port waits for) is
// checked by an assertion that stops the simulation.
module otpu_tmem #(
  parameter int WORDS = 8192,
  parameter int LANES = 4,
  parameter int NR = 6,
  parameter int NW = 4,
  parameter int IMPL = 2
) (
  input  logic                                   clk,
  input  logic [NR-1:0][LANES-1:0]               rd_en,
  input  logic [NR-1:0][LANES-1:0][31:0]         rd_addr,
  output logic [NR-1:0]                          rd_gnt,
  output logic [NR-1:0][LANES-1:0][31:0]         rd_data,
  input  logic [NW-1:0][LANES-1:0]               wr_en,
  input  logic [NW-1:0][LANES-1:0][31:0]         wr_addr,
  input  logic [NW-1:0][LANES-1:0][31:0]         wr_data,
  output logic [31:0]                            deny_count
);
  localparam int AWT = $clog2(WORDS);
  logic [31:0] mem [WORDS];

  // bank arbitration (IMPL 3): a port is granted when each of its lanes' banks is free of
  // lower-numbered ports reading another word of that bank
  always_comb begin
    for (int p = 0; p < NR; p++) begin
      rd_gnt[p] = 1'b1;
      if (IMPL == 3)
        for (int q = 0; q < p; q++)
          for (int a = 0; a < LANES; a++)
            for (int b = 0; b < LANES; b++)
              if (rd_en[p][a] && rd_en[q][b] && rd_addr[p][a] != rd_addr[q][b] &&
                  rd_addr[p][a] % LANES == rd_addr[q][b] % LANES)
                rd_gnt[p] = 1'b0;
    end
  end

  logic [NR-1:0] denied;
  logic [NR-1:0][LANES-1:0][31:0] denied_addr;
  logic [NR-1:0][LANES-1:0] denied_en;

  always_ff @(posedge clk) begin
    for (int p = 0; p < NR; p++)
      for (int l = 0; l < LANES; l++)
        if (rd_en[p][l] && rd_gnt[p]) rd_data[p][l] <= mem[rd_addr[p][l][AWT-1:0]];
    for (int q = 0; q < NW; q++)
      for (int l = 0; l < LANES; l++)
        if (wr_en[q][l]) mem[wr_addr[q][l][AWT-1:0]] <= wr_data[q][l];
    if (IMPL == 3) begin
      for (int p = 0; p < NR; p++) begin
        denied[p] <= |rd_en[p] && !rd_gnt[p];
        denied_addr[p] <= rd_addr[p];
        denied_en[p] <= rd_en[p];
        if (|rd_en[p] && !rd_gnt[p]) deny_count <= deny_count + 1;
        // the replayed words must not be written while the port waits
        if (denied[p])
          for (int l = 0; l < LANES; l++)
            for (int q = 0; q < NW; q++)
              for (int k = 0; k < LANES; k++)
                if (denied_en[p][l] && wr_en[q][k] && wr_addr[q][k] == denied_addr[p][l])
                  $fatal(1, "otpu_tmem: replay precondition violated: TMEM word %0d written while read port %0d waits for it",
                         denied_addr[p][l], p);
      end
    end
  end

  initial begin
    deny_count = 0;
    denied = '0;
  end
endmodule
